import { brokerPark, parkedFromUpstream } from './broker-park.js';
import { HEADERS, type ScalarHeaders, scalarHeaders } from './headers.js';

/**
 * A copy of a message published elsewhere (a wait, `failed`, `invalid`, back to `dispatch`) keeps
 * upstream's scalar headers and our story of the webhook, and drops what belonged to the one
 * message it was made from; what each kind then adds is its writer's job.
 */

/** The broker's own delivery and dead-letter bookkeeping: never copied, it describes one message. */
function isBrokerHeader(key: string): boolean {
  return key.startsWith('x-first-death') || key.startsWith('x-last-death') || key === 'x-delivery-count' || key === 'x-acquired-count';
}

/** What a resend starts over: the schedule, the attempts, the failure entry's place and id (the resender sets its own). */
const RESET_ON_RESEND: ReadonlySet<string> = new Set([
  HEADERS.attempts, HEADERS.deferrals, HEADERS.postponements, HEADERS.lastStatus, HEADERS.lastError, HEADERS.lastAttemptAt,
  HEADERS.failedAt, HEADERS.failedReason, HEADERS.failureId, HEADERS.claimId, HEADERS.entryType, HEADERS.streamOffset,
  HEADERS.ordered,
]);

/**
 * Our bookkeeping: trusted only on messages we moved, never on what upstream published. The routing
 * key our parks note (and `webhooks invalid requeue` keeps) marks a copy with no wait hand as one
 * moved back from invalid (intake's movedBack): carried from upstream's publish onto our own copy
 * of it (a fan-out share handed on, a wait, a failure and its resend), it went where its place in
 * order had ended and ended a spent wait. Our parks and the requeue write theirs after the copy.
 */
const BOOKKEEPING_HEADERS: ReadonlySet<string> = new Set([
  ...RESET_ON_RESEND,
  HEADERS.firstSeenAt, HEADERS.resentAt, HEADERS.resend, HEADERS.checkpointId, HEADERS.endpointId, HEADERS.originalRoutingKey,
]);

/**
 * Where a copy comes from decides what it drops: a `delivery` from dispatch its wait hand and its
 * order mark (and our bookkeeping when it came from upstream), a resent `failure-entry`
 * RESET_ON_RESEND, a message taken from `invalid` (`parked`) its invalid verdict when it goes back
 * to dispatch. The order mark is the walk's to give (x-ordered from its place, stages/effect.ts):
 * carried, a parked ordered retry moved back (sent outside the order, its place ended) marked its
 * next wait ordered, and that wait was dropped at its hand-back as one whose place had ended.
 */
type CopySource =
  | { from: 'delivery'; fromUpstream: boolean }
  | { from: 'failure-entry' }
  /** `upstreamExchange`: a copy the broker parked (dead-lettered) from `dispatch` that was published there still has what upstream published. */
  | { from: 'parked'; unpark: boolean; upstreamExchange: string; dispatch: string };

export function copyHeaders(headers: Record<string, unknown> | undefined, source: CopySource): ScalarHeaders {
  const copy = scalarHeaders(headers);
  // The broker parks a copy (dispatch's delivery limit, a reject) with the headers it was published
  // with, where the dispatcher's own parks drop upstream's bookkeeping: moved back to dispatch (the
  // default exchange, whose headers intake trusts), it is upstream's event. Dropped whether it is moved
  // or kept: put back in invalid, it no longer says where the broker parked it from.
  const park = source.from === 'parked' ? brokerPark(headers, source.dispatch) : undefined;
  const upstream = source.from === 'parked' && park !== undefined && parkedFromUpstream(park, source.upstreamExchange);
  const as: CopySource = upstream ? { from: 'delivery', fromUpstream: true } : source;
  // A test event's endpoint is trusted from upstream's exchange, as its test mark is (intake: the
  // portal publishes it there); dropped, its copy moved back went to every endpoint of its merchant.
  const testEndpoint = copy[HEADERS.testEvent] === true;
  for (const key of Object.keys(copy)) {
    if (isBrokerHeader(key) || (drops(key, as) && !(testEndpoint && key === HEADERS.endpointId))) delete copy[key];
  }
  return copy;
}

function drops(key: string, source: CopySource): boolean {
  switch (source.from) {
    case 'delivery':
      return key === HEADERS.waitHand || key === HEADERS.ordered || key === HEADERS.circuitProbe || (source.fromUpstream && (BOOKKEEPING_HEADERS.has(key) || key.startsWith('x-invalid-')));
    case 'failure-entry':
      return RESET_ON_RESEND.has(key);
    case 'parked':
      return source.unpark && key.startsWith('x-invalid-');
  }
}
