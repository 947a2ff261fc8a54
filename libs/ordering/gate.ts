import type { Logger } from '../logger/index.js';
import { type OrderAdmit, type OrderEnd, orderId, type OrderState, type OrderStore } from './store.js';

interface Pending {
  admits: OrderAdmit[];
  ends: OrderEnd[];
  done: Array<(states: Map<string, OrderState>) => void>;
}

/**
 * Batches the dispatcher's order steps like libs/waits' WaitWriter: whatever queued while a batch
 * was being written goes in the next one, one round trip each, one batch at a time: so a
 * dispatcher admits the webhooks it took in the order it took them (two batches at once let a later
 * one take a key's lock first, and a refund overtook its charge). A step resolves only once its
 * batch is committed; while PostgreSQL does not answer it is tried again (backoff up to
 * 2 s) and the deliveries stay unacked: an ordered merchant's webhooks are held, never sent out of
 * order.
 */
export class OrderGate {
  private next: Pending = { admits: [], ends: [], done: [] };
  private writing = false;
  private closed = false;
  private lastProblem = 0;
  readonly stats = { batches: 0, failures: 0 };

  constructor(
    private readonly store: OrderStore,
    private readonly logger: Logger,
    private readonly backoffMs: readonly number[] = [100, 250, 500, 1_000, 2_000],
  ) {}

  /** The webhook's place: `head` (attempt it), `waiting` (its wait is written) or `ended` (a copy of one done). */
  async admit(admit: OrderAdmit): Promise<OrderState> {
    const states = await this.enqueue((pending) => pending.admits.push(admit));
    return states.get(orderId(admit.merchantId, admit.webhookId)) ?? 'waiting';
  }

  /** The webhook ended: its row goes and the next webhook of its key is due. */
  async end(end: OrderEnd): Promise<void> {
    await this.enqueue((pending) => pending.ends.push(end));
  }

  /** Stops trying: steps still pending never resolve (their deliveries go back to the queue with the channel). */
  close(): void {
    this.closed = true;
  }

  private enqueue(add: (pending: Pending) => void): Promise<Map<string, OrderState>> {
    return new Promise((resolve) => {
      add(this.next);
      this.next.done.push(resolve);
      if (!this.writing) void this.drain();
    });
  }

  private async drain(): Promise<void> {
    this.writing = true;
    while (this.next.done.length > 0 && !this.closed) {
      const batch = this.next;
      this.next = { admits: [], ends: [], done: [] };
      for (let failures = 0; !this.closed; failures++) {
        try {
          const states = await this.store.step(batch.admits, batch.ends);
          this.stats.batches++;
          for (const resolve of batch.done) resolve(states);
          break;
        } catch (err) {
          this.stats.failures++;
          this.problem(err, batch.done.length);
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
    this.logger.warn('order steps not written; their deliveries are held unacked until PostgreSQL answers', { held, error: (err as Error)?.message ?? String(err) });
  }
}
