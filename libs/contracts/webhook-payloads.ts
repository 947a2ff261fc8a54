import { z } from 'zod';
import { type EventName, REFERENCE_FIELDS } from './events.js';
import { sampleEvent } from './samples.js';

/** What a merchant's server receives for each event (spec section 2), for the OpenAPI document's event catalog. */
const timestamp = (what: string) => z.string().describe(`${what}: <YYYY-MM-DD>T<HH:MM:SS.mmm>, no time zone designator`);
const status = z.enum(['successful', 'failed']).describe('successful or failed');

const customer = z
  .looseObject({
    id: z.number().int().describe('Customer identifier'),
    name: z.string(),
    email: z.string(),
    phone: z.union([z.string(), z.number()]).describe('Telephone number, relayed as upstream sent it; a string to keep its leading zero (the spec\'s samples write a bare 08012345678, which is not JSON)'),
    createdAt: z.string().describe('<YYYY-MM-DD> <HH:MM:SS>'),
    updatedAt: z.string().describe('<YYYY-MM-DD> <HH:MM:SS>'),
  })
  .partial()
  .describe('The customer (spec 2.5)');

const reference = (what: string) => z.string().min(1).max(200).describe(`${what}; required: the webhook is resent by it`);

const refundRef = z.string().min(1).max(200).describe('Refund reference, UUID format; the refund is resent by it');
const refundedTnxRef = z.string().min(1).max(200).describe('Reference of the transaction refunded, UUID format; the refund is resent by it too');
const refund = {
  refundRef: refundRef.optional(),
  tnxRef: refundedTnxRef.optional(),
  createdAt: timestamp('When the refund was made').optional(),
  refundType: z.string().optional().describe('partial in the samples'),
  amount: z.number().optional(),
  completeMessage: z.string().optional(),
  status: status.optional(),
  customer: customer.optional(),
};

const DATA: Record<EventName, z.ZodType> = {
  'charge.completed': z.looseObject({
    tnxRef: reference('Transaction reference, UUID format'),
    createdAt: timestamp('When the collection was made').optional(),
    narration: z.string().optional(),
    sourceAmount: z.number().optional(),
    sourceCurrency: z.string().optional(),
    destinationAmount: z.number().optional(),
    destinationCurrency: z.string().optional(),
    status: status.optional(),
    customer: customer.optional(),
  }),
  payout: z.looseObject({
    reference: reference('Payout reference, a dash-separated string'),
    createdAt: timestamp('When the payout was made').optional(),
    amount: z.number().optional(),
    accountName: z.string().optional(),
    narration: z.string().optional(),
    name: z.string().optional().describe('Beneficiary or sender name'),
    currency: z.string().optional(),
    bankName: z.string().optional(),
    accountNumber: z.string().optional().describe('Receiving account number, digits, as a string'),
    status: status.optional(),
  }),
  'refund.completed': z.union([
    z.looseObject({ ...refund, refundRef }),
    z.looseObject({ ...refund, tnxRef: refundedTnxRef }),
  ]).describe('At least one of refundRef and tnxRef'),
};

export const EVENT_SUMMARIES: Record<EventName, string> = {
  'charge.completed': 'A collection: a customer paid the merchant',
  payout: 'A payout: money sent from the merchant to a bank account',
  'refund.completed': 'A refund of a collection',
};

export function webhookPayloadSchema(event: EventName): z.ZodObject {
  return z.object({ event: z.literal(event).describe('The event name'), data: DATA[event] }).describe(EVENT_SUMMARIES[event]);
}

/** A body of each event, with fixed values so the document does not change between builds. */
export function webhookExample(event: EventName): { event: EventName; data: Record<string, unknown> } {
  const { data } = sampleEvent(event, 'm_example', new Date('2026-05-01T10:00:00.000Z'));
  const fixed: Record<string, string> = { tnxRef: '5e0c7c2a-9d0c-4a5e-8f0e-1a2b3c4d5e6f', refundRef: '9b1f6c3e-2a4d-4e8b-b7a1-0c9d8e7f6a5b', reference: 'PO-1777629600000-3f2a9c1b' };
  for (const field of REFERENCE_FIELDS[event]) data[field] = fixed[field];
  return { event, data };
}
