/** Headers the service writes: each message's story in the RabbitMQ console; scalars only (streams carry no tables). */
export const HEADERS = {
  merchantId: 'x-merchant-id',
  event: 'x-event',
  reference: 'x-reference',
  tnxRef: 'x-tnx-ref',
  webhookId: 'x-webhook-id',
  attempts: 'x-attempts',
  /** Times set aside because the endpoint was busy. */
  deferrals: 'x-deferrals',
  /** Times postponed because the endpoint's circuit was open. */
  postponements: 'x-postponements',
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
  /** Set by the broker. */
  streamOffset: 'x-stream-offset',
  checkpointId: 'x-checkpoint-id',
  /** On a resent copy: its resend's claim on the failure in PostgreSQL. */
  claimId: 'x-claim-id',
  resentAt: 'x-resent-at',
  /** On a resent copy: which resend of the webhook it is (1, 2, ...). */
  resend: 'x-resend',
  /** A failure entry's own id, random per failure. */
  failureId: 'x-failure-id',
  /** Trusted from upstream: it only takes attempts away. */
  testEvent: 'x-test-event',
  /** On a wait handed back: only the current hand is attempted. */
  waitHand: 'x-wait-hand',
  /** On a wait handed back as its endpoint's circuit's probe. Never from upstream. */
  circuitProbe: 'x-circuit-probe',
  /** On an ordered webhook's wait: its end releases the next of its reference. Never from upstream. */
  ordered: 'x-ordered',
  /** The endpoint a fanned-out copy is for. Never from upstream. */
  endpointId: 'x-endpoint-id',
} as const;

/** Why a webhook went to `failed` (docs/operating.md), so operators can tell an outage from a bug. */
export const FAILED_REASONS = {
  attemptsExhausted: 'attempts-exhausted',
  /** Open for the schedule's whole span, after at least one real attempt. */
  circuitOpen: 'circuit-open',
  blocked: 'blocked',
  webhookDisabled: 'webhook-disabled',
  endpointDisabled: 'endpoint-disabled',
  merchantRemoved: 'merchant-removed',
  eventNotSubscribed: 'event-not-subscribed',
} as const;

export type FailedReason = (typeof FAILED_REASONS)[keyof typeof FAILED_REASONS];

/** x-invalid-code of parked messages; `delivery-limit`: parked by the broker after too many returns. */
export const INVALID_CODES = [
  'not-json', 'invalid-envelope', 'missing-reference', 'invalid-message-id', 'too-large', 'unknown-merchant',
  'internal-error', 'wait-not-ended', 'upstream-x-death', 'delivery-limit',
] as const;

export const ENTRY_TYPES = { failure: 'failure', checkpoint: 'checkpoint', rollover: 'rollover' } as const;

export type ScalarHeaders = Record<string, string | number | boolean>;

/** The most bytes upstream's headers may take: amqplib encodes a message's headers in 64 KiB (upstream's may be 128). */
export const MAX_FOREIGN_HEADER_BYTES = 32 * 1024;

const SERVICE_HEADERS: ReadonlySet<string> = new Set(Object.values(HEADERS));

/** What the headers that are not the service's take as AMQP encodes them. */
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

/** The scalar headers of a message, but none holding a NUL (no PostgreSQL text keeps one) or too long a name. */
export function scalarHeaders(headers: Record<string, unknown> | undefined): ScalarHeaders {
  const out: ScalarHeaders = {};
  if (!headers) return out;
  for (const [key, value] of Object.entries(headers)) {
    if (key.includes('\u0000') || (typeof value === 'string' && value.includes('\u0000'))) continue;
    // A name read from bytes that are not UTF-8 (each U+FFFD, three bytes) may no longer fit in 255.
    if (Buffer.byteLength(key) > 255) continue;
    if (typeof value === 'string' || typeof value === 'boolean') out[key] = value;
    else if (typeof value === 'number' && Number.isFinite(value)) out[key] = value;
  }
  return out;
}
