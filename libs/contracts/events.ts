import { z } from 'zod';

export const EVENT_NAMES = ['charge.completed', 'payout', 'refund.completed'] as const;
export type EventName = (typeof EVENT_NAMES)[number];

export function isEventName(value: unknown): value is EventName {
  return typeof value === 'string' && (EVENT_NAMES as readonly string[]).includes(value);
}

/** Fields of `data` that identify the transaction, per event (DESIGN.md "References"). */
export const REFERENCE_FIELDS: Record<EventName, readonly string[]> = {
  'charge.completed': ['tnxRef'],
  payout: ['reference'],
  'refund.completed': ['refundRef', 'tnxRef'],
};

export const MAX_REFERENCE_LENGTH = 200;

/** No control characters, and no lone UTF-16 surrogate (JSON's `\ud800` escape), which PostgreSQL's json refuses. */
export function isWellFormedReference(text: string): boolean {
  // eslint-disable-next-line no-control-regex
  return text.length >= 1 && text.length <= MAX_REFERENCE_LENGTH && !/[\u0000-\u001f\u007f-\u009f]/.test(text) && !LONE_SURROGATE.test(text);
}

/** String.isWellFormed is ES2024. */
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

/** The rule for a messageId, said the same way by the dispatcher and the CLI. */
export const WEBHOOK_ID_RULE = 'printable ASCII without spaces, at most 200 characters: it is sent as the webhook-id header';

export const MAX_WEBHOOK_ID_LENGTH = 200;

/** Sent as the webhook-id header and signed: no byte that HTTP or a merchant's parser could mangle. */
export function isWellFormedWebhookId(value: unknown): boolean {
  return typeof value === 'string' && value.length <= MAX_WEBHOOK_ID_LENGTH && /^[\x21-\x7e]+$/.test(value);
}

/** Only what the service relies on is checked; the rest of `data` is relayed untouched (loose, never coerced). */
export const upstreamMessageSchema = z.looseObject({
  merchantId: z.string().refine(isWellFormedReference, 'must be 1 to 200 characters without control characters or a lone surrogate'),
  event: z.enum(EVENT_NAMES),
  data: z.record(z.string(), z.unknown()),
});

export type UpstreamMessage = z.infer<typeof upstreamMessageSchema>;

export function referencesOf(event: EventName, data: Record<string, unknown>): string[] {
  const values = REFERENCE_FIELDS[event].map((field) => data[field]);
  return values.filter((value): value is string => typeof value === 'string' && isWellFormedReference(value));
}

/** What orders an ordered merchant's webhooks: a refund waits for the charge it refunds (both by `tnxRef`). */
export const ORDER_KEY_FIELD: Record<EventName, string> = {
  'charge.completed': 'tnxRef',
  payout: 'reference',
  'refund.completed': 'tnxRef',
};

/** A reference holds no control character, so a payout never shares a line with a charge whose tnxRef is the same string. */
export const PAYOUT_ORDER_KEY_PREFIX = 'payout\u001f';

/** Undefined when the key field is absent or malformed (a refund known only by its refundRef): outside the order. */
export function orderKeyOf(event: EventName, data: Record<string, unknown>): string | undefined {
  const value = data[ORDER_KEY_FIELD[event]];
  if (typeof value !== 'string' || !isWellFormedReference(value)) return undefined;
  return event === 'payout' ? `${PAYOUT_ORDER_KEY_PREFIX}${value}` : value;
}

/** The key and, for a payout's, the bare reference an older release gave it. */
export function orderKeysOf(key: string): string[] {
  return key.startsWith(PAYOUT_ORDER_KEY_PREFIX) ? [key, key.slice(PAYOUT_ORDER_KEY_PREFIX.length)] : [key];
}
