import { HEADERS, type ScalarHeaders, scalarHeaders } from './headers.js';

/** The broker's own delivery and dead-letter bookkeeping: never copied, it describes one message. */
function isBrokerHeader(key: string): boolean {
  return key.startsWith('x-first-death') || key.startsWith('x-last-death') || key === 'x-delivery-count' || key === 'x-acquired-count';
}

/** What a resend starts over: the schedule, the attempts, the failure entry's place and id. */
const RESET_ON_RESEND: ReadonlySet<string> = new Set([
  HEADERS.attempts, HEADERS.deferrals, HEADERS.postponements, HEADERS.lastStatus, HEADERS.lastError, HEADERS.lastAttemptAt,
  HEADERS.failedAt, HEADERS.failedReason, HEADERS.failureId, HEADERS.claimId, HEADERS.entryType, HEADERS.streamOffset,
  HEADERS.ordered,
]);

/** Our bookkeeping: trusted only on messages we moved, never on what upstream published. */
const BOOKKEEPING_HEADERS: ReadonlySet<string> = new Set([
  ...RESET_ON_RESEND,
  HEADERS.firstSeenAt, HEADERS.resentAt, HEADERS.resend, HEADERS.checkpointId, HEADERS.endpointId, HEADERS.originalRoutingKey,
]);

/**
 * Where a copy comes from decides what it drops: a `delivery` its wait hand and order mark (the walk
 * gives that from its place) and, from upstream, our bookkeeping; a resent `failure-entry`
 * RESET_ON_RESEND; one taken from `invalid` (`parked`) its verdict when it goes back to dispatch.
 */
type CopySource =
  | { from: 'delivery'; fromUpstream: boolean }
  | { from: 'failure-entry' }
  | { from: 'parked'; unpark: boolean; upstreamExchange: string; dispatch: string };

export function copyHeaders(headers: Record<string, unknown> | undefined, source: CopySource): ScalarHeaders {
  const copy = scalarHeaders(headers);
  // The broker parks a copy with the headers it was published with: upstream's, it is upstream's event.
  const park = source.from === 'parked' ? brokerPark(headers, source.dispatch) : undefined;
  const upstream = source.from === 'parked' && park !== undefined && parkedFromUpstream(park, source.upstreamExchange);
  const as: CopySource = upstream ? { from: 'delivery', fromUpstream: true } : source;
  // A test event's endpoint is trusted from upstream, as its test mark is (the portal publishes it there).
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

/** The broker's park of a message from `queue`, from its x-death entry; never x-first-death-*, which may be upstream's. */
export function brokerPark(headers: Record<string, unknown> | undefined, queue: string) {
  const deaths = headers?.['x-death'];
  if (!Array.isArray(deaths)) return undefined;
  for (const death of deaths as unknown[]) {
    if (typeof death !== 'object' || death === null) continue;
    const { queue: from, reason, exchange, time, 'routing-keys': keys } = death as Record<string, unknown>;
    if (from !== queue || typeof reason !== 'string' || typeof exchange !== 'string') continue;
    const seconds = typeof time === 'number' ? time : (time as { value?: unknown } | undefined)?.value;
    const routingKey = Array.isArray(keys) && typeof keys[0] === 'string' ? keys[0] : undefined;
    return { reason, exchange, routingKey, time: typeof seconds === 'number' ? seconds : undefined };
  }
  return undefined;
}

/**
 * Whether a copy the broker parked from dispatch is upstream's: its entry names upstream's exchange,
 * or its TTL ran out (no copy of ours has an expiration; RabbitMQ 3.10 keeps upstream's entry).
 */
export function parkedFromUpstream(park: { reason: string; exchange: string }, upstreamExchange: string): boolean {
  return park.exchange === upstreamExchange || park.reason === 'expired';
}
