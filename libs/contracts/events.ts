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

/**
 * A reference as the resend API and the operator CLI accept it: printable ASCII without spaces, at
 * most MAX_REFERENCE_LENGTH characters.
 */
export function isWellFormedReference(text: string): boolean {
  return text.length >= 1 && text.length <= MAX_REFERENCE_LENGTH && /^[\x21-\x7e]+$/.test(text);
}

/**
 * The upstream message: only what the service relies on is checked; everything else in `data`
 * is relayed untouched, so the schema is loose and never coerces.
 */
export const upstreamMessageSchema = z.looseObject({
  merchantId: z.string().min(1).max(200),
  event: z.enum(EVENT_NAMES),
  data: z.record(z.string(), z.unknown()),
});

export type UpstreamMessage = {
  merchantId: string;
  event: EventName;
  data: Record<string, unknown>;
};

/** The references present in `data` for this event, in the order of REFERENCE_FIELDS. */
export function referencesOf(event: EventName, data: Record<string, unknown>): string[] {
  const refs: string[] = [];
  for (const field of REFERENCE_FIELDS[event]) {
    const value = data[field];
    if (typeof value === 'string' && value.length > 0 && value.length <= MAX_REFERENCE_LENGTH) refs.push(value);
  }
  return refs;
}
