import type { Logger } from '../logger/index.js';
import type { WaitEnd, WaitPut, WaitStore } from './store.js';

interface Pending {
  puts: WaitPut[];
  ends: WaitEnd[];
  done: Array<() => void>;
}

/**
 * Batches the dispatcher's wait writes: whatever queued while a batch was being written goes in the
 * next one, one statement each. A write resolves only once its batch is committed; while
 * PostgreSQL does not answer it is tried again (backoff up to 2 s) and its deliveries stay unacked,
 * so the prefetch bounds what is held and consumption pauses beyond it. It never rejects: nothing
 * is given up.
 */
export class WaitWriter {
  private next: Pending = { puts: [], ends: [], done: [] };
  private writing = false;
  private closed = false;
  private lastProblem = 0;
  /** Batches written, and tries that failed (PostgreSQL down or refusing). */
  readonly stats = { batches: 0, failures: 0 };

  constructor(
    private readonly store: WaitStore,
    private readonly logger: Logger,
    private readonly backoffMs: readonly number[] = [100, 250, 500, 1_000, 2_000],
  ) {}

  put(wait: WaitPut): Promise<void> {
    return this.enqueue((pending) => pending.puts.push(wait));
  }

  end(wait: WaitEnd): Promise<void> {
    return this.enqueue((pending) => pending.ends.push(wait));
  }

  /** Stops trying: writes still pending never resolve (their deliveries go back to the queue with the channel). */
  close(): void {
    this.closed = true;
  }

  private enqueue(add: (pending: Pending) => void): Promise<void> {
    return new Promise<void>((resolve) => {
      add(this.next);
      this.next.done.push(resolve);
      if (!this.writing) void this.drain();
    });
  }

  private async drain(): Promise<void> {
    this.writing = true;
    while (this.next.done.length > 0 && !this.closed) {
      const batch = this.next;
      this.next = { puts: [], ends: [], done: [] };
      for (let failures = 0; !this.closed; failures++) {
        try {
          await this.store.write(batch.puts, batch.ends);
          this.stats.batches++;
          for (const resolve of batch.done) resolve();
          break;
        } catch (err) {
          this.stats.failures++;
          this.problem(err, batch.done.length);
          // What queued meanwhile joins the batch being retried: one statement when it is back.
          batch.puts.push(...this.next.puts);
          batch.ends.push(...this.next.ends);
          batch.done.push(...this.next.done);
          this.next = { puts: [], ends: [], done: [] };
          await new Promise((r) => setTimeout(r, this.backoffMs[Math.min(failures, this.backoffMs.length - 1)]));
        }
      }
    }
    this.writing = false;
  }

  /** One line per 30 s while PostgreSQL is down, not one per batch. */
  private problem(err: unknown, held: number): void {
    const now = Date.now();
    if (now - this.lastProblem < 30_000) return;
    this.lastProblem = now;
    this.logger.warn('waits not written; their deliveries are held unacked until PostgreSQL answers', { held, error: (err as Error)?.message ?? String(err) });
  }
}
