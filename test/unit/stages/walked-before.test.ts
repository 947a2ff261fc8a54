import type { ConsumeMessage } from 'amqplib';
import { HEADERS } from '../../../libs/contracts/index.js';
import { walkedBefore } from '../../../apps/dispatcher/stages/orphaned-places.js';

const EVENTS = 'test.walked.events';

function message(exchange: string, headers: Record<string, unknown>, redelivered = false): ConsumeMessage {
  return { content: Buffer.from('{}'), fields: { exchange, redelivered, routingKey: 'charge.completed', deliveryTag: 1, consumerTag: 'c' }, properties: { headers } } as unknown as ConsumeMessage;
}

describe('walkedBefore: which copies may have taken places in order on an earlier walk', () => {
  it('counts our own copies moved back from invalid or handed on as a fan-out share', () => {
    expect(walkedBefore(message('', { [HEADERS.originalRoutingKey]: 'charge.completed' }), EVENTS)).toBe(true);
    expect(walkedBefore(message('', { [HEADERS.endpointId]: 'ep_1' }), EVENTS)).toBe(true);
  });

  it("never takes upstream's publish for such a copy by the headers it carries: only a redelivery of it walked before", () => {
    expect(walkedBefore(message(EVENTS, { [HEADERS.originalRoutingKey]: 'charge.completed' }), EVENTS)).toBe(false);
    expect(walkedBefore(message(EVENTS, { [HEADERS.endpointId]: 'ep_1' }), EVENTS)).toBe(false);
    expect(walkedBefore(message(EVENTS, {}, true), EVENTS)).toBe(true);
    expect(walkedBefore(message(EVENTS, {}), EVENTS)).toBe(false);
  });
});
