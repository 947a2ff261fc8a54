/** Headers the service writes: each message's story in the RabbitMQ console; scalars only (streams carry no tables). */
export const HEADERS = {
  /** On a wait handed back, the row's merchant (set by the scheduler): what ends the wait of one that fails intake. */
  merchantId: 'x-merchant-id',
  event: 'x-event',
  reference: 'x-reference',
  /** A refund's transaction reference, so a refund is found by either reference. */
  tnxRef: 'x-tnx-ref',
  webhookId: 'x-webhook-id',
  attempts: 'x-attempts',
  /** Times a delivery was set aside because its endpoint was busy; not attempts. */
  deferrals: 'x-deferrals',
  /** Times a delivery was postponed because its endpoint's circuit was open; not attempts. */
  postponements: 'x-postponements',
  /** Why a failure entry is in `failed`: one of FAILED_REASONS. */
  failedReason: 'x-failed-reason',
  lastStatus: 'x-last-status',
  lastError: 'x-last-error',
  firstSeenAt: 'x-first-seen-at',
  lastAttemptAt: 'x-last-attempt-at',
  failedAt: 'x-failed-at',
  entryType: 'x-entry-type',
  invalidReason: 'x-invalid-reason',
  invalidCode: 'x-invalid-code',
  invalidAt: 'x-invalid-at',
  originalRoutingKey: 'x-original-routing-key',
  /** Set by the broker on every entry read from a stream. */
  streamOffset: 'x-stream-offset',
  checkpointId: 'x-checkpoint-id',
  /** On a resent copy: its resend's claim on the failure in PostgreSQL, which the dispatcher marks resent when it takes the copy. */
  claimId: 'x-claim-id',
  resentAt: 'x-resent-at',
  /** On a resent copy: which resend of the webhook it is (1, 2, ...), counted in PostgreSQL; orders its attempts after the earlier runs' in the log. */
  resend: 'x-resend',
  /** A failure entry's own id, random per failure: tells two failures of one webhook apart in the console. */
  failureId: 'x-failure-id',
  /** The portal's test event: attempted once, counted apart; trusted from upstream (it only takes attempts away). */
  testEvent: 'x-test-event',
  /** On a wait handed back to dispatch: the row's hand; only the current hand is attempted, an older copy is dropped. */
  waitHand: 'x-wait-hand',
  /** On a wait handed back as its endpoint's circuit's probe (set by the scheduler): sent through the open circuit. Never from upstream. */
  circuitProbe: 'x-circuit-probe',
  /** On an ordered webhook's wait: its end releases the next of its reference. Never from upstream; a resend drops it. */
  ordered: 'x-ordered',
  /** The endpoint (ep_…) a fanned-out copy is for, kept by its waits, failure and resends; never from upstream. */
  endpointId: 'x-endpoint-id',
} as const;

/** Why a webhook went to `failed`, so operators can tell an outage from a bug. */
export const FAILED_REASONS = {
  /** Every attempt of the schedule was made and failed. */
  attemptsExhausted: 'attempts-exhausted',
  /** The endpoint's circuit stayed open for the schedule's whole span (after at least one real attempt). */
  circuitOpen: 'circuit-open',
  /** The address guard refused the URL; no request was made. */
  blocked: 'blocked',
  /** The merchant's webhook was disabled while this one was retrying or resent. */
  webhookDisabled: 'webhook-disabled',
  /** The endpoint was disabled automatically (ENDPOINT_DISABLE_AFTER) while this webhook was retrying or resent. */
  endpointDisabled: 'endpoint-disabled',
  /** The merchant left the directory while this webhook was retrying or resent. */
  merchantRemoved: 'merchant-removed',
  /** The merchant's webhook stopped receiving this event (its events filter) while it was retrying or resent. */
  eventNotSubscribed: 'event-not-subscribed',
} as const;

export type FailedReason = (typeof FAILED_REASONS)[keyof typeof FAILED_REASONS];

/** x-invalid-code of parked messages; `delivery-limit`: parked by the broker after too many returns. */
export const INVALID_CODES = [
  'not-json',
  'invalid-envelope',
  'missing-reference',
  'invalid-message-id',
  'too-large',
  'unknown-merchant',
  'internal-error',
  'wait-not-ended',
  'upstream-x-death',
  'delivery-limit',
] as const;

export const ENTRY_TYPES = { failure: 'failure', checkpoint: 'checkpoint', rollover: 'rollover' } as const;

export type ScalarHeaders = Record<string, string | number | boolean>;

/**
 * The most bytes a message's own headers (upstream's, not HEADERS) may take among those a copy
 * carries. amqplib, which publishes every copy (a wait handed back, `failed`, `invalid`), encodes a
 * message's headers in 64 KiB, and the service's add a few KiB; an upstream client may send up to
 * the frame size (128 KiB). Past this no copy of the message could be published, so it is parked
 * at once as too-large, without them.
 */
export const MAX_FOREIGN_HEADER_BYTES = 32 * 1024;

const SERVICE_HEADERS: ReadonlySet<string> = new Set(Object.values(HEADERS));

/** What the headers that are not the service's take as AMQP encodes them (name, type, value; a number at most 8). */
export function foreignHeaderBytes(headers: ScalarHeaders): number {
  let bytes = 0;
  for (const [key, value] of Object.entries(headers)) {
    if (SERVICE_HEADERS.has(key)) continue;
    bytes += 2 + Buffer.byteLength(key) + (typeof value === 'string' ? 4 + Buffer.byteLength(value) : 8);
  }
  return bytes;
}

/** What every message about a webhook says of it in the console: merchant, event, webhook-id, references. */
export function webhookHeaders(merchantId: string, event: string, webhookId: string, references: readonly string[]): ScalarHeaders {
  const headers: ScalarHeaders = { [HEADERS.merchantId]: merchantId, [HEADERS.event]: event, [HEADERS.webhookId]: webhookId };
  if (references[0]) headers[HEADERS.reference] = references[0];
  if (references[1]) headers[HEADERS.tnxRef] = references[1];
  return headers;
}

/**
 * Keeps the scalar headers of a message, dropping arrays and tables such as the broker's x-death,
 * and any holding a NUL: no PostgreSQL text or jsonb keeps one, and carried into a wait's row it
 * failed the batch of every wait written with it; and any whose name no copy can carry.
 */
export function scalarHeaders(headers: Record<string, unknown> | undefined): ScalarHeaders {
  const out: ScalarHeaders = {};
  if (!headers) return out;
  for (const [key, value] of Object.entries(headers)) {
    if (key.includes('\u0000') || (typeof value === 'string' && value.includes('\u0000'))) continue;
    // A name read from bytes that are not UTF-8 (each U+FFFD, three bytes) may no longer fit the
    // table's 255: amqplib then refused every copy (a park, a move), which was requeued to its delivery limit.
    if (Buffer.byteLength(key) > 255) continue;
    if (typeof value === 'string' || typeof value === 'boolean') out[key] = value;
    else if (typeof value === 'number' && Number.isFinite(value)) out[key] = value;
  }
  return out;
}
