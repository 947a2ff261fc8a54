import type { Queryable } from '../delivery-store/index.js';
import { orderKeysOf, type ScalarHeaders } from '../contracts/index.js';
import type { WaitKey } from '../waits/index.js';

// An ordered webhook holds a row of `webhook_order` until it ends; only a line's head goes to an attempt.
export type OrderEnd = WaitKey;

export type OrderPlace = OrderEnd & { key: string };

/** What an intake behind an earlier webhook of its key waits with. */
export interface OrderWait {
  headers: ScalarHeaders;
  content: Buffer;
}

export type OrderAdmit = OrderPlace & Partial<OrderWait>;

/** `ended`: a copy of one already ended; `behind` (stepped without its wait): nothing written yet. */
export type OrderState = 'head' | 'waiting' | 'ended' | 'behind';

export function orderId(merchantId: string, endpointId: string, webhookId: string): string {
  return `${merchantId}\u001f${endpointId}\u001f${webhookId}`;
}

/** How long an ended webhook's row is kept: a copy redelivered within it is known as done, not sent again. */
export const ORDER_ENDED_KEEP_MS = 3_600_000;

/** A merchant's endpoint ('' for its first, on places taken before endpoints). */
export type OrderLine = Required<Omit<OrderEnd, 'webhookId'>>;

const RELEASE = 'SELECT released_merchant, released_endpoint, released FROM webhook_order_release($1, $2, $3, $4)';

const STEP = 'SELECT admitted_merchant, admitted_endpoint, admitted, state FROM webhook_order_step($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)';

export class OrderStore {
  constructor(private readonly db: Queryable) {}

  /** Open, or ended within ORDER_ENDED_KEEP_MS (as webhook_order_step has it). */
  async holds(place: OrderEnd): Promise<boolean> {
    const { rows } = await this.db.query<{ held: boolean }>(
      `SELECT EXISTS (SELECT 1 FROM webhook_order WHERE merchant_id = $1 AND endpoint_id = $2 AND webhook_id = $3
         AND (ended_at IS NULL OR ended_at >= now() - $4::float8 * interval '1 millisecond')) AS held`,
      [place.merchantId, place.endpointId ?? '', place.webhookId, ORDER_ENDED_KEEP_MS],
    );
    return rows[0]?.held === true;
  }

  /** Where the webhook holds an open place with no wait, under its key or the one an older release gave it. */
  async openPlaces(merchantId: string, webhookId: string, key: string): Promise<string[]> {
    const { rows } = await this.db.query<{ endpoint_id: string }>(
      `SELECT o.endpoint_id FROM webhook_order o WHERE o.merchant_id = $1 AND o.order_key = ANY ($3::text[]) AND o.webhook_id = $2 AND o.ended_at IS NULL
         AND NOT EXISTS (SELECT 1 FROM webhook_waits w WHERE w.merchant_id = o.merchant_id AND w.endpoint_id = o.endpoint_id AND w.webhook_id = o.webhook_id)`,
      [merchantId, webhookId, orderKeysOf(key)],
    );
    return rows.map((row) => row.endpoint_id);
  }

  /** Open places older than `olderThanMs` with no wait, of lines not in `keep` nor ordering per the merchants table. */
  async release(keep: readonly OrderLine[], olderThanMs: number, batch: number): Promise<number> {
    const { rows } = await this.db.query(RELEASE, [keep.map((l) => l.merchantId), keep.map((l) => l.endpointId), olderThanMs, batch]);
    return rows.length;
  }

  /** Ends then admits, in one round trip. */
  async step(admits: readonly OrderAdmit[], ends: readonly OrderEnd[]): Promise<Map<string, OrderState>> {
    const { rows } = await this.db.query<{ admitted_merchant: string; admitted_endpoint: string; admitted: string; state: OrderState }>(STEP, [
      admits.map((a) => a.merchantId),
      admits.map((a) => a.endpointId ?? ''),
      admits.map((a) => a.key),
      admits.map((a) => a.webhookId),
      admits.map((a) => (a.headers ? JSON.stringify(a.headers) : null)),
      admits.map((a) => a.content?.toString('hex') ?? null),
      ends.map((e) => e.merchantId),
      ends.map((e) => e.endpointId ?? ''),
      ends.map((e) => e.webhookId),
      ORDER_ENDED_KEEP_MS,
    ]);
    // Two merchants may publish one messageId, and a webhook has a place per endpoint.
    return new Map(rows.map((row) => [orderId(row.admitted_merchant, row.admitted_endpoint, row.admitted), row.state]));
  }
}
