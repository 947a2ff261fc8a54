import type { Logger } from '../logger/index.js';
import { isDataRefusal } from '../delivery-store/refusals.js';
import { RetryingBatcher, throttledWarning } from '../runtime/batcher.js';
import { withDeadline } from '../runtime/timers.js';
import { type OrderAdmit, type OrderEnd, orderId, type OrderPlace, type OrderState, type OrderStore, type OrderWait } from './store.js';
import { type OrderTurn, OrderTurns } from './turns.js';

type Item = { admit: OrderAdmit } | { end: OrderEnd };

/** How long a look-up of a redelivered copy's places may take: a slow PostgreSQL must not hold merchants that do not order. */
export const ORDER_LOOKUP_TIMEOUT_MS = 2_000;

/**
 * Batches the order steps, admissions and ends together, one batch at a time, in the order they are
 * asked (two batches at once let a refund overtake its charge); a webhook asks for its place in its
 * turn (turn()), so a dispatcher's webhooks of one reference are admitted in the order it took them,
 * whatever their walks met on the way. A step resolves once committed; while PostgreSQL does not
 * answer it is tried again and the deliveries stay unacked: held, never sent out of order. A step
 * PostgreSQL refuses for what it carries rejects alone (WriteRefusedError: its delivery is parked),
 * the others written.
 */
export class OrderGate {
  private readonly batcher: RetryingBatcher<Item, Map<string, OrderState>>;
  private readonly turns = new OrderTurns();

  constructor(private readonly store: OrderStore, logger: Logger) {
    const warn = throttledWarning((message, fields) => logger.warn(message, fields));
    this.batcher = new RetryingBatcher<Item, Map<string, OrderState>>(
      (items) => store.step(items.flatMap((i) => ('admit' in i ? [i.admit] : [])), items.flatMap((i) => ('end' in i ? [i.end] : []))),
      (err, held) => warn('order steps not written; their deliveries are held unacked until PostgreSQL answers', err, { held }),
      undefined,
      isDataRefusal,
    );
  }

  /** A message's turn to ask for its places, taken as it is consumed, before anything it awaits. */
  turn(merchantId: string, key: string): OrderTurn {
    return this.turns.take(`${merchantId}\u001f${key}`);
  }

  /**
   * The webhook's place, asked in its turn (which it passes once asked); stepped without its wait
   * first (most head their line), again with `wait()` once found behind (its place taken already).
   */
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
    // With its wait it is never answered `behind` (webhook_order_step writes it); were it, attempting it could overtake, acking it lose it:
    // it may be neither attempted nor acked.
    if (again === 'behind') throw new Error(`order: ${place.webhookId} was stepped with its wait and its wait was not written`);
    return again;
  }

  /** Queued at once (the batcher writes in the order added), not after an await. */
  private step(admit: OrderAdmit): Promise<OrderState> {
    // Every admit has its row in the answer; were one missing, attempting it risks a duplicate, acking it a loss.
    return this.batcher.add({ admit }).then((states) => states.get(orderId(admit.merchantId, admit.endpointId ?? '', admit.webhookId)) ?? 'head');
  }

  /** Whether the webhook took a place in its line before (one round trip, not batched: asked of redelivered copies only). */
  holds(place: OrderEnd): Promise<boolean> {
    return withDeadline(this.store.holds(place), ORDER_LOOKUP_TIMEOUT_MS);
  }

  /** The endpoints where the webhook holds an open place and no wait (asked of redelivered copies only). */
  openPlaces(merchantId: string, webhookId: string, key: string): Promise<string[]> {
    return withDeadline(this.store.openPlaces(merchantId, webhookId, key), ORDER_LOOKUP_TIMEOUT_MS);
  }

  /** The webhook ended: its row goes and the next webhook of its key is due. */
  async end(end: OrderEnd): Promise<void> {
    await this.batcher.add({ end });
  }

  /** Stops trying: steps still pending never resolve (their deliveries go back with the channel). */
  close(): void {
    this.batcher.close();
  }
}
