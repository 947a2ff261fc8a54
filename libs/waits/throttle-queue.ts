import type { Queryable } from '../delivery-store/index.js';
import { stretchCells } from '../rate-limit/index.js';

/** The GCRA cell of an endpoint's queue of throttled waits, which gives each the next place. */
export function throttleQueueCell(merchantId: string, endpointId: string): string {
  return `throttle-queue:${merchantId}\u001f${endpointId}`;
}

/**
 * The queue is spread to the new rate from now, or from `hearMs` after now when faster, so that the
 * dispatchers have heard of it before the first comes back. Only waits not handed back and not yet due.
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
