/**
 * Batches writes that must not be lost, one batch at a time in the order added: what is added while
 * one is written goes in the next. A batch that fails is tried again, what was added meanwhile
 * joining it. It never rejects: while the write fails, the callers wait (deliveries stay unacked).
 */
export class RetryingBatcher<T, R> {
  private next: T[] = [];
  private done: Array<(result: R) => void> = [];
  private writing = false;
  private closed = false;
  /** Batches written, and tries that failed. */
  readonly stats = { batches: 0, failures: 0 };

  constructor(
    private readonly write: (items: T[]) => Promise<R>,
    /** Told of each failed try, with how many callers it holds. */
    private readonly onFailure: (err: unknown, held: number) => void,
    private readonly backoffMs: readonly number[] = [100, 250, 500, 1_000, 2_000],
  ) {}

  add(item: T): Promise<R> {
    return new Promise<R>((resolve) => {
      this.next.push(item);
      this.done.push(resolve);
      if (!this.writing) void this.drain();
    });
  }

  /** Stops trying: items still pending never resolve (their deliveries go back to the queue with the channel). */
  close(): void {
    this.closed = true;
  }

  private async drain(): Promise<void> {
    this.writing = true;
    while (this.done.length > 0 && !this.closed) {
      const items = this.next;
      const done = this.done;
      this.next = [];
      this.done = [];
      for (let failures = 0; !this.closed; failures++) {
        try {
          const result = await this.write(items);
          this.stats.batches++;
          for (const resolve of done) resolve(result);
          break;
        } catch (err) {
          this.stats.failures++;
          this.onFailure(err, done.length);
          items.push(...this.next);
          done.push(...this.done);
          this.next = [];
          this.done = [];
          await new Promise((r) => setTimeout(r, this.backoffMs[Math.min(failures, this.backoffMs.length - 1)]));
        }
      }
    }
    this.writing = false;
  }
}

/** True at most once per `everyMs` (30 s): a problem that repeats while it lasts is logged once a window, not once a try. */
export function onceEvery(everyMs = 30_000): () => boolean {
  let last = 0;
  return () => {
    const now = Date.now();
    if (now - last < everyMs) return false;
    last = now;
    return true;
  };
}

/** A failure handler that logs one line per `everyMs` (30 s) while the writes fail, not one per try. */
export function throttledWarning(warn: (message: string, fields: Record<string, unknown>) => void, message: string, everyMs = 30_000): (err: unknown, held: number) => void {
  const due = onceEvery(everyMs);
  return (err, held) => {
    if (due()) warn(message, { held, error: (err as Error)?.message ?? String(err) });
  };
}
