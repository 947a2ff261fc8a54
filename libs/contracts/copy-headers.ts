import { HEADERS, type ScalarHeaders, scalarHeaders } from './headers.js';

/**
 * The header lifecycle of a copy. Whenever the service publishes a message elsewhere (a wait
 * row, `failed`, `invalid`, back to `dispatch` from a resend, a recovery or the CLI), the copy
 * keeps upstream's own scalar headers and our story of the webhook, and drops what belonged to the
 * one message it was made from. What each kind of copy then resets or adds is its writer's job
 * (attempt headers for a retry, a failure entry's reason, a resend's offset), named here per kind.
 */

/** The broker's own delivery and dead-letter bookkeeping: never copied, it describes one message. */
function isBrokerHeader(key: string): boolean {
  return key.startsWith('x-first-death') || key.startsWith('x-last-death') || key === 'x-delivery-count' || key === 'x-acquired-count';
}

/** One hand-back of a wait: a copy that leaves dispatch starts a wait of its own. */
export const WAIT_HEADERS: ReadonlySet<string> = new Set([HEADERS.waitHand]);

/** Our bookkeeping: trusted only on messages we moved, never on what upstream published. */
export const BOOKKEEPING_HEADERS: ReadonlySet<string> = new Set([
  HEADERS.attempts,
  HEADERS.deferrals,
  HEADERS.postponements,
  HEADERS.lastStatus,
  HEADERS.lastError,
  HEADERS.firstSeenAt,
  HEADERS.lastAttemptAt,
  HEADERS.failedAt,
  HEADERS.failedReason,
  HEADERS.entryType,
  HEADERS.resentAt,
  HEADERS.resend,
  HEADERS.claimId,
  HEADERS.failureId,
  HEADERS.checkpointId,
  HEADERS.streamOffset,
  HEADERS.ordered,
  HEADERS.endpointId,
]);

/** What a resend starts over: the webhook's schedule, its attempts, and its failure entry's place and id (the resender names the entry in headers of its own). */
export const RESET_ON_RESEND: ReadonlySet<string> = new Set([
  HEADERS.attempts,
  HEADERS.deferrals,
  HEADERS.postponements,
  HEADERS.lastStatus,
  HEADERS.lastError,
  HEADERS.lastAttemptAt,
  HEADERS.failedAt,
  HEADERS.failedReason,
  HEADERS.failureId,
  HEADERS.claimId,
  HEADERS.entryType,
  HEADERS.streamOffset,
  HEADERS.ordered,
]);

/**
 * Where a copy comes from, which decides what it drops:
 * - `delivery`: a message consumed from dispatch, written as a wait, moved to `failed` or `invalid`; drops
 *   its wait, and our bookkeeping too when it came straight from upstream's exchange.
 * - `failure-entry`: a failure entry resent to dispatch; drops the attempt headers (RESET_ON_RESEND).
 * - `parked`: a message taken from `invalid`; drops the invalid verdict when it goes back to dispatch.
 */
export type CopySource =
  | { from: 'delivery'; fromUpstream: boolean }
  | { from: 'failure-entry' }
  | { from: 'parked'; unpark: boolean };

/** The scalar headers a copy keeps from `headers`, by the lifecycle above. */
export function copyHeaders(headers: Record<string, unknown> | undefined, source: CopySource): ScalarHeaders {
  const copy = scalarHeaders(headers);
  for (const key of Object.keys(copy)) {
    if (isBrokerHeader(key) || drops(key, source)) delete copy[key];
  }
  return copy;
}

function drops(key: string, source: CopySource): boolean {
  switch (source.from) {
    case 'delivery':
      return WAIT_HEADERS.has(key) || (source.fromUpstream && (BOOKKEEPING_HEADERS.has(key) || key.startsWith('x-invalid-')));
    case 'failure-entry':
      return RESET_ON_RESEND.has(key);
    case 'parked':
      return source.unpark && key.startsWith('x-invalid-');
  }
}
