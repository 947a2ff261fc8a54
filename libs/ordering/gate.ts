import type { Logger } from '../logger/index.js';
import { RetryingBatcher, throttledWarning } from '../runtime/batcher.js';
import { type OrderAdmit, type OrderEnd, orderId, type OrderState, type OrderStore } from './store.js';

/**
 * Batches the dispatcher's order steps, admissions and ends in two lines of batches, each one
 * round trip per batch and one batch at a time: so a dispatcher admits the webhooks it took in the
 * order it took them (two admission batches at once let a later one take a key's lock first, and
 * a refund overtook its charge), while an end never waits behind admissions (the keys' locks keep
 * one key's steps one at a time across the two). A step resolves only once its batch is
 * committed; while PostgreSQL does not answer it is tried again (backoff up to 2 s) and the
 * deliveries stay unacked: an ordered merchant's webhooks are held, never sent out of order.
 */
export class OrderGate {
  private readonly admits: RetryingBatcher<OrderAdmit, Map<string, OrderState>>;
  private readonly ends: RetryingBatcher<OrderEnd, Map<string, OrderState>>;

  constructor(store: OrderStore, logger: Logger, backoffMs?: readonly number[]) {
    const warn = throttledWarning((message, fields) => logger.warn(message, fields), 'order steps not written; their deliveries are held unacked until PostgreSQL answers');
    this.admits = new RetryingBatcher((admits) => store.step(admits, []), warn, backoffMs);
    this.ends = new RetryingBatcher((ends) => store.step([], ends), warn, backoffMs);
  }

  /** Batches written, and tries that failed, admissions and ends together. */
  get stats(): { batches: number; failures: number } {
    return { batches: this.admits.stats.batches + this.ends.stats.batches, failures: this.admits.stats.failures + this.ends.stats.failures };
  }

  /** The webhook's place: `head` (attempt it), `waiting` (its wait is written) or `ended` (a copy of one done). */
  async admit(admit: OrderAdmit): Promise<OrderState> {
    const states = await this.admits.add(admit);
    // Every admit has its row in the answer; were one missing, attempting it risks a duplicate, acking it a loss.
    return states.get(orderId(admit.merchantId, admit.webhookId)) ?? 'head';
  }

  /** The webhook ended: its row goes and the next webhook of its key is due. */
  async end(end: OrderEnd): Promise<void> {
    await this.ends.add(end);
  }

  /** Stops trying: steps still pending never resolve (their deliveries go back to the queue with the channel). */
  close(): void {
    this.admits.close();
    this.ends.close();
  }
}
