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
 * at the old rate, is spread to the new one from now (to none: all due now), or from `hearMs` after
 * now when it is faster, so that the dispatchers have heard of the new rate before the first comes
 * back (one that has not takes its slot at the old rate, and throttles it again there: a loaded CI
 * run drained a raised backlog at the old rate). Only waits not handed back (a lease's pick time is
 * not its due time) and not yet due; their order stays.
 */
export async function respaceThrottled(db: Queryable, merchantId: string, endpointId: string, from: number, to: number, hearMs = 0): Promise<void> {
  if (from === Infinity || from === to) return;
  const factor = from / to;
  const shift = factor < 1 ? hearMs : 0;
  await db.query(
    `UPDATE webhook_waits SET due_at = now() + $4::float8 * interval '1 millisecond' + (due_at - now()) * $3::float8,
       pick_at = now() + $4::float8 * interval '1 millisecond' + (pick_at - now()) * $3::float8
     WHERE merchant_id = $1 AND endpoint_id = $2 AND reason = 'throttled' AND pick_at = due_at AND due_at > now()`,
    [merchantId, endpointId, factor, shift],
  );
  await stretchCells(db, throttleQueueCell(merchantId, endpointId), factor);
}
