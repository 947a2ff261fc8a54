import type { Logger } from '../logger/index.js';
import { isDataRefusal } from '../delivery-store/refusals.js';
import { RetryingBatcher, throttledWarning } from '../runtime/batcher.js';
import { within } from '../runtime/timers.js';
import { type OrderAdmit, type OrderEnd, orderId, type OrderPlace, type OrderState, type OrderStore, type OrderWait } from './store.js';
import { type OrderTurn, OrderTurns } from './turns.js';

type Item = { admit: OrderAdmit } | { end: OrderEnd };

/** A slow PostgreSQL must not hold merchants that do not order. */
const ORDER_LOOKUP_TIMEOUT_MS = 2_000;

/**
 * Batches the order steps, one batch at a time in the order asked (two at once let a refund overtake
 * its charge). A step resolves once committed; one PostgreSQL refuses rejects alone.
 */
export class OrderGate {
  private readonly batcher: RetryingBatcher<Item, Map<string, OrderState>>;
  private readonly turns = new OrderTurns();
  /** Look-ups of open places in flight, by webhook: one timed out runs on to its statement timeout. */
  private readonly lookUps = new Map<string, Promise<string[]>>();

  constructor(private readonly store: OrderStore, logger: Logger) {
    const warn = throttledWarning((message, fields) => logger.warn(message, fields));
    this.batcher = new RetryingBatcher<Item, Map<string, OrderState>>(
      (items) => store.step(items.flatMap((i) => ('admit' in i ? [i.admit] : [])), items.flatMap((i) => ('end' in i ? [i.end] : []))),
      (err, held) => warn('order steps not written; their deliveries are held unacked until PostgreSQL answers', err, { held }),
      undefined,
      isDataRefusal,
    );
  }

  /** Taken as the message is consumed, before anything it awaits. */
  turn(merchantId: string, key: string): OrderTurn {
    return this.turns.take(`${merchantId}\u001f${key}`);
  }

  /** Asked in its turn; stepped without its wait first (most head their line), again with it if behind. */
  async admit(place: OrderPlace, wait: () => OrderWait, turn: OrderTurn): Promise<Exclude<OrderState, 'behind'>> {
    let stepping: Promise<OrderState>;
    try {
      await turn.come;
      stepping = this.step(place);
    } finally {
      turn.pass();
    }
    const state = await stepping;
    if (state !== 'behind') return state;
    const again = await this.step({ ...place, ...wait() });
    // Never with its wait written; were it, neither attempting (overtakes) nor acking (loses) would do.
    if (again === 'behind') throw new Error(`order: ${place.webhookId} was stepped with its wait and its wait was not written`);
    return again;
  }

  /** Queued at once (the batcher writes in the order added), not after an await. */
  private step(admit: OrderAdmit): Promise<OrderState> {
    return this.batcher.add({ admit }).then((states) => states.get(orderId(admit.merchantId, admit.endpointId ?? '', admit.webhookId)) ?? 'head');
  }

  /** Asked of redelivered copies only: not batched. */
  holds(place: OrderEnd): Promise<boolean> {
    return within(ORDER_LOOKUP_TIMEOUT_MS, this.store.holds(place), 'reject');
  }

  /**
   * Asked again while one asked before still runs, it waits for that one: a copy held asks each
   * second, and a query for each would fill the pool behind a slow PostgreSQL.
   */
  openPlaces(merchantId: string, webhookId: string, key: string): Promise<string[]> {
    const id = `${merchantId}\u001f${webhookId}\u001f${key}`;
    let asked = this.lookUps.get(id);
    if (!asked) {
      asked = this.store.openPlaces(merchantId, webhookId, key).finally(() => this.lookUps.delete(id));
      this.lookUps.set(id, asked);
    }
    return within(ORDER_LOOKUP_TIMEOUT_MS, asked, 'reject');
  }

  async end(end: OrderEnd): Promise<void> {
    await this.batcher.add({ end });
  }

  /** Steps still pending never resolve (their deliveries go back with the channel). */
  close(): void {
    this.batcher.close();
  }
}
