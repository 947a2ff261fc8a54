import type { Logger } from '../logger/index.js';
import type { Merchant } from '../merchants/index.js';
import { throttledWarning } from '../runtime/batcher.js';
import { Periodic } from '../runtime/periodic.js';
import type { OrderLine, OrderStore } from './store.js';

export const ORDER_UPKEEP_EVERY_MS = 5_000;
export const ORDER_UPKEEP_BATCH = 100;

interface OrderUpkeepOptions {
  /** A place open this long with no wait must have ended: it must cover an attempt (a head in flight has no wait). */
  olderThanMs: number;
  everyMs?: number;
}

/** The lines that order now, as the directory has them ('' for a merchant whose first endpoint orders). */
export function orderingLines(merchants: readonly Merchant[]): OrderLine[] {
  return merchants.flatMap(({ id, endpoints }) => endpoints.flatMap((endpoint, i) => {
    if (!endpoint.enabled || endpoint.orderByReference !== true) return [];
    const line = { merchantId: id, endpointId: endpoint.id };
    return i === 0 ? [line, { merchantId: id, endpointId: '' }] : [line];
  }));
}

/**
 * Releases the places whose end will never come (the webhooks behind them waited for ever). A line
 * that still orders is never touched: its old head may be back behind a backlog.
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

  /** After a full batch more may be waiting: the next goes at once. */
  private async release(): Promise<number | undefined> {
    const released = await this.store.release(this.ordering(), this.options.olderThanMs, ORDER_UPKEEP_BATCH);
    this.stats.released += released;
    if (released > 0) this.logger.warn('places in order released: their endpoint no longer orders and their end never came; the webhooks behind them go', { released });
    return released < ORDER_UPKEEP_BATCH ? undefined : 0;
  }
}
