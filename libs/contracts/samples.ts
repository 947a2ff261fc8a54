import { randomUUID } from 'node:crypto';
import type { EventName, UpstreamMessage } from './events.js';

/** A realistic event of each kind with fresh references, shaped as in spec section 2. */
export function sampleEvent(event: EventName, merchantId: string, now = new Date()): UpstreamMessage {
  return { merchantId, event, data: sampleData(event, now) };
}

function sampleData(event: EventName, now: Date): Record<string, unknown> {
  const createdAt = now.toISOString().slice(0, 23); // <YYYY-MM-DD>T<HH:MM:SS.mmm>, no zone, as in the spec
  const customerAt = now.toISOString().slice(0, 19).replace('T', ' ');
  const customer = {
    id: 1042,
    name: 'Ada Obi',
    email: 'ada.obi@example.com',
    phone: '08012345678',
    createdAt: customerAt,
    updatedAt: customerAt,
  };
  switch (event) {
    case 'charge.completed':
      return {
        createdAt,
        narration: 'Collections ',
        sourceAmount: 5000,
        sourceCurrency: 'NGN',
        destinationAmount: 5000,
        destinationCurrency: 'NGN',
        tnxRef: randomUUID(),
        status: 'successful',
        customer,
      };
    case 'payout':
      return {
        reference: `PO-${Date.now()}-${randomUUID().slice(0, 8)}`,
        createdAt,
        amount: 25000,
        accountName: 'Ada Obi',
        narration: 'Vendor settlement',
        name: 'Ada Obi',
        currency: 'NGN',
        bankName: 'Example Bank',
        accountNumber: '0123456789',
        status: 'successful',
      };
    case 'refund.completed':
      return {
        createdAt,
        refundType: 'partial',
        refundRef: randomUUID(),
        amount: 1500,
        completeMessage: '',
        tnxRef: randomUUID(),
        status: 'successful',
        customer,
      };
  }
}
