import type { Logger } from '../logger/index.js';
import { RetryingBatcher, throttledWarning } from '../runtime/batcher.js';
import { type OrderAdmit, type OrderEnd, orderId, type OrderState, type OrderStore } from './store.js';

type Item = { admit: OrderAdmit } | { end: OrderEnd };

/** Lines of batches a gate writes at once (each a connection of the waits' pool while it writes). */
export const ORDER_LANES = 4;

/**
 * Batches the dispatcher's order steps, admissions and ends together, in ORDER_LANES lines by key:
 * in each line whatever queued while a batch was being written goes in the next one, one round
 * trip each, one batch at a time, so a dispatcher admits the webhooks of one key in the order it
 * took them (two batches of one key at once let the later take the key's lock first: a refund
 * overtook its charge). A step is mostly its commit's flush (about 8 ms here), so one line capped
 * an ordered merchant at about 1,700 deliveries/s where unordered went 3,300 to 5,700 (bench/order.ts);
 * the lines flush side by side. A step resolves only once its batch is committed; while PostgreSQL does not answer it is tried again (backoff up to 2 s) and the
 * deliveries stay unacked: an ordered merchant's webhooks are held, never sent out of order.
 */
export class OrderGate {
  private readonly lanes: Array<RetryingBatcher<Item, Map<string, OrderState>>>;

  constructor(store: OrderStore, logger: Logger, backoffMs?: readonly number[], lanes = ORDER_LANES) {
    const warn = throttledWarning((message, fields) => logger.warn(message, fields), 'order steps not written; their deliveries are held unacked until PostgreSQL answers');
    this.lanes = Array.from({ length: lanes }, () => new RetryingBatcher<Item, Map<string, OrderState>>(
      (items) => store.step(items.flatMap((i) => ('admit' in i ? [i.admit] : [])), items.flatMap((i) => ('end' in i ? [i.end] : []))),
      warn,
      backoffMs,
    ));
  }

  /** Batches written, and tries that failed. */
  get stats(): { batches: number; failures: number } {
    return this.lanes.reduce((sum, lane) => ({ batches: sum.batches + lane.stats.batches, failures: sum.failures + lane.stats.failures }), { batches: 0, failures: 0 });
  }

  /** A key's line: always the same one for the same merchant and key. */
  private lane(merchantId: string, key: string): RetryingBatcher<Item, Map<string, OrderState>> {
    let hash = 0;
    for (let i = 0; i < merchantId.length; i++) hash = (hash * 31 + merchantId.charCodeAt(i)) | 0;
    for (let i = 0; i < key.length; i++) hash = (hash * 31 + key.charCodeAt(i)) | 0;
    return this.lanes[Math.abs(hash) % this.lanes.length]!;
  }

  /** The webhook's place: `head` (attempt it), `waiting` (its wait is written) or `ended` (a copy of one done). */
  async admit(admit: OrderAdmit): Promise<OrderState> {
    const states = await this.lane(admit.merchantId, admit.key).add({ admit });
    // Every admit has its row in the answer; were one missing, attempting it risks a duplicate, acking it a loss.
    return states.get(orderId(admit.merchantId, admit.webhookId)) ?? 'head';
  }

  /** The webhook ended: its row goes and the next webhook of its key is due. */
  async end(end: OrderEnd): Promise<void> {
    await this.lane(end.merchantId, end.key).add({ end });
  }

  /** Stops trying: steps still pending never resolve (their deliveries go back to the queue with the channel). */
  close(): void {
    for (const lane of this.lanes) lane.close();
  }
}
