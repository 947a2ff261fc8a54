import { writeApart } from './apart.js';
import { NamedError } from './named-error.js';

/** A write the database refused for what one item carried: that item's caller gets this, the others are written. */
export class WriteRefusedError extends NamedError {
  constructor(cause: unknown) {
    super(`refused by the database: ${(cause as Error)?.message ?? String(cause)}`, { cause });
  }
}

const CLOSED = new Error('the batcher is closed');

interface Pending<T, R> {
  item: T;
  resolve: (result: R) => void;
  reject: (err: WriteRefusedError) => void;
}

/**
 * Batches writes that must not be lost, one batch at a time: a batch that fails is tried again (the
 * callers wait), one `refused` for what it carries is written apart, the item refused alone rejects.
 */
export class RetryingBatcher<T, R> {
  private waiting: Array<Pending<T, R>> = [];
  private writing = false;
  private closed = false;

  constructor(
    private readonly write: (items: T[]) => Promise<R>,
    private readonly onFailure: (err: unknown, held: number) => void,
    private readonly backoffMs: readonly number[] = [100, 250, 500, 1_000, 2_000],
    private readonly refused: (err: unknown) => boolean = () => false,
  ) {}

  add(item: T): Promise<R> {
    return new Promise<R>((resolve, reject) => {
      this.waiting.push({ item, resolve, reject });
      if (!this.writing) void this.drain();
    });
  }

  /** Stops trying: items still pending never resolve. */
  close(): void {
    this.closed = true;
  }

  private async drain(): Promise<void> {
    this.writing = true;
    for (let failures = 0; this.waiting.length > 0 && !this.closed; ) {
      const batch = this.waiting;
      this.waiting = [];
      const left = await this.writeBatch(batch);
      if (left.length === 0) {
        failures = 0;
        continue;
      }
      this.waiting = [...left, ...this.waiting];
      await new Promise((r) => setTimeout(r, this.backoffMs[Math.min(failures++, this.backoffMs.length - 1)]));
    }
    this.writing = false;
  }

  /** Returns what is left to try again, in order. */
  private async writeBatch(batch: Array<Pending<T, R>>): Promise<Array<Pending<T, R>>> {
    const told = new Set<Pending<T, R>>();
    try {
      // Closed in the middle of a split: the rest is left pending, as a batch not yet begun is.
      await writeApart(batch, (part) => (this.closed ? Promise.reject(CLOSED) : this.write(part.map((p) => p.item))), this.refused, {
        written: (part, result) => part.forEach((p) => (told.add(p), p.resolve(result))),
        refused: (p, err) => (told.add(p), p.reject(new WriteRefusedError(err))),
      });
      return [];
    } catch (err) {
      const left = batch.filter((p) => !told.has(p));
      if (err !== CLOSED) this.onFailure(err, left.length + this.waiting.length);
      return left;
    }
  }
}

/** Logs at most one warning per 30 s, with its error. */
export function throttledWarning(warn: (message: string, fields: Record<string, unknown>) => void): (message: string, err: unknown, fields?: Record<string, unknown>) => void {
  let last = 0;
  return (message, err, fields) => {
    const now = Date.now();
    if (now - last < 30_000) return;
    last = now;
    warn(message, { ...fields, error: (err as Error)?.message ?? String(err) });
  };
}
