import type { Logger } from '../logger/index.js';
import type { Merchant } from '../merchants/index.js';
import { throttledWarning } from '../runtime/batcher.js';
import { Periodic } from '../runtime/periodic.js';
import type { OrderLine, OrderStore } from './store.js';

/** How often each dispatcher looks for places to release, and how many one statement releases. */
export const ORDER_UPKEEP_EVERY_MS = 5_000;
export const ORDER_UPKEEP_BATCH = 100;

export interface OrderUpkeepOptions {
  /**
   * The bound: a place open this long with no wait of its own (PostgreSQL's clock, from its
   * admission) whose endpoint no longer orders is released. A head's first attempt is in flight
   * from its admission to its end with no wait (a retry, a busy endpoint, a throttle write one), so
   * this must cover an attempt: the program gives the wait lease (WAIT_LEASE, at least twice
   * DELIVERY_TIMEOUT_MS), the time the waits already allow a hand-back to come to its attempt.
   */
  olderThanMs: number;
  everyMs?: number;
}

/**
 * The lines that order now, as the directory has them: each enabled endpoint with orderByReference,
 * and '' for a merchant whose first endpoint is one (places taken before endpoints, as endpointFor reads them).
 */
export function orderingLines(merchants: readonly Merchant[]): OrderLine[] {
  const lines: OrderLine[] = [];
  for (const merchant of merchants) {
    merchant.endpoints.forEach((endpoint, i) => {
      if (!endpoint.enabled || endpoint.orderByReference !== true) return;
      lines.push({ merchantId: merchant.id, endpointId: endpoint.id });
      if (i === 0) lines.push({ merchantId: merchant.id, endpointId: '' });
    });
  }
  return lines;
}

/**
 * Releases the places whose end will never come, in each dispatcher, from the rows: an open place
 * with no wait, older than the bound, of an endpoint that no longer orders (order off, disabled or
 * deleted, its merchant gone). Its copy ends it when it is given again, unless PostgreSQL does not
 * answer that copy's look-up within 2 s (the dispatcher then sends it, or skips it, and acks it
 * with its place open): the webhooks behind it, waiting with no due time, waited for ever. A
 * line that still orders is never touched: its old head may be back in `dispatch` behind a
 * backlog, and it keeps its place, as a killed dispatcher's does. `ordering` is this dispatcher's
 * directory, a cache: the statement keeps the lines the merchants table says order too (0027), so
 * a directory that has not heard of a change releases nothing that orders. Any number of dispatchers may
 * run it at once (each key under its advisory lock, not waited for).
 */
export class OrderUpkeep {
  readonly stats = { released: 0 };
  private readonly problem = throttledWarning((message, fields) => this.logger.warn(message, fields));
  private readonly loop = new Periodic(() => this.release(), () => this.options.everyMs ?? ORDER_UPKEEP_EVERY_MS, {
    failed: (err) => this.problem('places in order not looked at: PostgreSQL did not answer; trying again', err),
  });

  constructor(
    private readonly store: OrderStore,
    private readonly ordering: () => readonly OrderLine[],
    private readonly logger: Logger,
    private readonly options: OrderUpkeepOptions,
  ) {}

  start(): void {
    void this.loop.start();
  }

  stop(): Promise<void> {
    return this.loop.stop();
  }

  /** One statement's release; after a full batch more may be waiting: the next goes at once. */
  private async release(): Promise<number | undefined> {
    const released = await this.store.release(this.ordering(), this.options.olderThanMs, ORDER_UPKEEP_BATCH);
    this.stats.released += released;
    if (released > 0) this.logger.warn('places in order released: their endpoint no longer orders and their end never came; the webhooks behind them go', { released });
    return released < ORDER_UPKEEP_BATCH ? undefined : 0;
  }
}
