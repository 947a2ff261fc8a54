import type { Queryable } from '../delivery-store/index.js';
import { stretchCells } from '../rate-limit/index.js';

/**
 * An endpoint's queue of throttled webhooks: their waits, due a little before their places, and the
 * GCRA cell in `rate_limits` that gives each the next place (the dispatcher's throttle lays it out).
 */
export function throttleQueueCell(merchantId: string, endpointId: string): string {
  return `throttle-queue:${merchantId}\u001f${endpointId}`;
}

/**
 * The endpoint's rate went from `from` to `to` per second (Infinity: no limit): its queue, laid out
 * at the old rate, is spread to the new one from now (to none: all due now). Only waits not handed
 * back (a lease's pick time is not its due time) and not yet due; their order stays.
 */
export async function respaceThrottled(db: Queryable, merchantId: string, endpointId: string, from: number, to: number): Promise<void> {
  if (from === Infinity || from === to) return;
  const factor = from / to;
  await db.query(
    `UPDATE webhook_waits SET due_at = now() + (due_at - now()) * $3::float8, pick_at = now() + (pick_at - now()) * $3::float8
     WHERE merchant_id = $1 AND endpoint_id = $2 AND reason = 'throttled' AND pick_at = due_at AND due_at > now()`,
    [merchantId, endpointId, factor],
  );
  await stretchCells(db, throttleQueueCell(merchantId, endpointId), factor);
}
