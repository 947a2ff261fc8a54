import { randomUUID } from 'node:crypto';
import { type EventName, REFERENCE_FIELDS, sampleEvent } from '../../../libs/contracts/index.js';

/** The sample events' amount fields: zero in a test, so no test reads as money moved. */
const AMOUNT_FIELDS = ['sourceAmount', 'destinationAmount', 'amount'];

/**
 * A sample of the event marked as a test inside the signed body: `data.test: true`, every amount
 * 0, and references that all start with TEST-. Published with x-test-event: attempted once.
 */
export function testSample(event: EventName, merchantId: string) {
  const message = sampleEvent(event, merchantId);
  const data = message.data as Record<string, unknown>;
  for (const field of REFERENCE_FIELDS[event]) data[field] = `TEST-${randomUUID()}`;
  for (const field of AMOUNT_FIELDS) if (field in data) data[field] = 0;
  data.test = true;
  return message as typeof message & { data: Record<string, unknown> };
}
