import { type HeldMessage, moveMessage } from '../../../libs/broker/index.js';
import { copyHeaders, HEADERS } from '../../../libs/contracts/index.js';
import { fakeBroker } from './fakes.js';

function held(live = true) {
  const settled: string[] = [];
  const message: HeldMessage & { settled: string[] } = {
    content: Buffer.from('{}'),
    properties: { headers: {}, messageId: undefined, contentType: undefined, userId: 'guest', expiration: '1000', correlationId: 'c1' } as never,
    live,
    settled,
    ack: () => settled.push('ack'),
    nack: (requeue) => settled.push(requeue ? 'requeue' : 'drop'),
  };
  return message;
}

describe('the move primitive', () => {
  it('publishes the copy with its properties (never user-id or expiration), then acks', async () => {
    const { broker, published } = fakeBroker();
    const message = held();
    expect(await moveMessage(broker, message, 'q', { backoffMs: [], headers: () => ({ a: 1 }), webhookId: 'evt_1' })).toBe('moved');
    expect(published[0]!.options).toMatchObject({ persistent: true, contentType: 'application/json', messageId: 'evt_1', correlationId: 'c1', headers: { a: 1 } });
    expect(published[0]!.options.userId).toBeUndefined();
    expect(published[0]!.options.expiration).toBeUndefined();
    expect(message.settled).toEqual(['ack']);
  });

  it('tries again with fresh headers after a refused publish, and acks only after the work that follows the publish', async () => {
    const { broker, published } = fakeBroker(1);
    const message = held();
    let n = 0;
    const order: string[] = [];
    await moveMessage(broker, message, 'q', { backoffMs: [1], headers: () => ({ try: ++n }), afterPublish: async () => void order.push(`journal after ${message.settled.length} acks`) });
    expect(published.map((p) => p.options.headers)).toEqual([{ try: 2 }]);
    expect(order).toEqual(['journal after 0 acks']);
  });

  it('publishes nothing for a message whose channel is gone', async () => {
    const { broker, published } = fakeBroker();
    expect(await moveMessage(broker, held(false), 'q', { backoffMs: [], headers: () => ({}) })).toBe('channel-lost');
    expect(published).toEqual([]);
  });

  it('hands the message back once after the last backoff, never in a loop', async () => {
    const { broker } = fakeBroker(10);
    const message = held();
    expect(await moveMessage(broker, message, 'q', { backoffMs: [1, 1], headers: () => ({}) })).toBe('requeued');
    expect(message.settled).toEqual(['requeue']);
  });
});

describe('the header lifecycle of a copy', () => {
  const story = { 'x-upstream': 'billing', [HEADERS.attempts]: 2, [HEADERS.waitHand]: 1, 'x-first-death-queue': 'q', 'x-delivery-count': 3, [HEADERS.invalidCode]: 'not-json' };

  it('a delivery from our own queues keeps its story and drops its wait and the broker bookkeeping', () => {
    expect(copyHeaders(story, { from: 'delivery', fromUpstream: false })).toEqual({ 'x-upstream': 'billing', [HEADERS.attempts]: 2, [HEADERS.invalidCode]: 'not-json' });
  });

  it('a delivery drops its order mark: the walk that writes the copy marks it from its own place', () => {
    expect(copyHeaders({ ...story, [HEADERS.ordered]: true }, { from: 'delivery', fromUpstream: false })[HEADERS.ordered]).toBeUndefined();
  });

  it("a delivery straight from upstream's exchange keeps none of our bookkeeping", () => {
    expect(copyHeaders(story, { from: 'delivery', fromUpstream: true })).toEqual({ 'x-upstream': 'billing' });
    // Our parks' mark of a copy moved back from invalid (intake's movedBack): upstream's is not ours.
    expect(copyHeaders({ ...story, [HEADERS.originalRoutingKey]: 'payout' }, { from: 'delivery', fromUpstream: true })).toEqual({ 'x-upstream': 'billing' });
    expect(copyHeaders({ ...story, [HEADERS.originalRoutingKey]: 'payout' }, { from: 'delivery', fromUpstream: false })[HEADERS.originalRoutingKey]).toBe('payout');
  });

  it("a test event from upstream's exchange keeps its endpoint, trusted there as its test mark is", () => {
    const test = { 'x-upstream': 'billing', [HEADERS.testEvent]: true, [HEADERS.endpointId]: 'ep_second', [HEADERS.attempts]: 3 };
    expect(copyHeaders(test, { from: 'delivery', fromUpstream: true })).toEqual({ 'x-upstream': 'billing', [HEADERS.testEvent]: true, [HEADERS.endpointId]: 'ep_second' });
    expect(copyHeaders({ ...test, [HEADERS.testEvent]: 'true' }, { from: 'delivery', fromUpstream: true })).toEqual({ 'x-upstream': 'billing', [HEADERS.testEvent]: 'true' });
  });

  it('a resent failure entry starts its attempts over', () => {
    const entry = { 'x-upstream': 'billing', [HEADERS.attempts]: 5, [HEADERS.failedReason]: 'attempts-exhausted', [HEADERS.entryType]: 'failure', [HEADERS.firstSeenAt]: 't' };
    expect(copyHeaders(entry, { from: 'failure-entry' })).toEqual({ 'x-upstream': 'billing', [HEADERS.firstSeenAt]: 't' });
  });

  it('a parked message moved back to dispatch drops its invalid verdict, one kept in invalid keeps it', () => {
    expect(copyHeaders(story, { from: 'parked', unpark: true, upstreamExchange: 'webhooks.events', dispatch: 'webhooks.dispatch' })[HEADERS.invalidCode]).toBeUndefined();
    expect(copyHeaders(story, { from: 'parked', unpark: false, upstreamExchange: 'webhooks.events', dispatch: 'webhooks.dispatch' })[HEADERS.invalidCode]).toBe('not-json');
  });

  it("a copy the broker parked from upstream's exchange keeps none of our bookkeeping, moved back or kept; one it parked from ours keeps it", () => {
    const forged = { 'x-upstream': 'billing', [HEADERS.waitHand]: 3, [HEADERS.attempts]: 99, [HEADERS.invalidCode]: 'not-json', 'x-first-death-reason': 'delivery_limit' };
    const parkedFrom = (exchange: string) => ({ 'x-first-death-exchange': exchange, 'x-death': [{ queue: 'webhooks.dispatch', reason: 'delivery_limit', exchange, count: 1 }] });
    const fromUpstream = { ...forged, ...parkedFrom('webhooks.events') };
    expect(copyHeaders(fromUpstream, { from: 'parked', unpark: true, upstreamExchange: 'webhooks.events', dispatch: 'webhooks.dispatch' })).toEqual({ 'x-upstream': 'billing' });
    // Kept, it no longer says where the broker parked it from: dropped then too.
    expect(copyHeaders(fromUpstream, { from: 'parked', unpark: false, upstreamExchange: 'webhooks.events', dispatch: 'webhooks.dispatch' })).toEqual({ 'x-upstream': 'billing' });
    expect(copyHeaders({ ...forged, ...parkedFrom('') }, { from: 'parked', unpark: true, upstreamExchange: 'webhooks.events', dispatch: 'webhooks.dispatch' })).toEqual({ 'x-upstream': 'billing', [HEADERS.waitHand]: 3, [HEADERS.attempts]: 99 });
    expect(copyHeaders({ ...forged, ...parkedFrom('') }, { from: 'parked', unpark: false, upstreamExchange: 'webhooks.events', dispatch: 'webhooks.dispatch' })).toEqual({ 'x-upstream': 'billing', [HEADERS.waitHand]: 3, [HEADERS.attempts]: 99, [HEADERS.invalidCode]: 'not-json' });
  });

  it("the exchange a copy was parked from is its x-death entry for dispatch's, never x-first-death-* (upstream's, on one republished from a dead-letter queue of its own)", () => {
    const republished = {
      'x-upstream': 'billing', [HEADERS.waitHand]: 3, [HEADERS.attempts]: 99,
      'x-first-death-exchange': 'billing.events', 'x-first-death-reason': 'expired',
      'x-death': [{ queue: 'webhooks.dispatch', reason: 'delivery_limit', exchange: 'webhooks.events', count: 1 }, { queue: 'billing.retry', reason: 'expired', exchange: 'billing.events', count: 1 }],
    };
    expect(copyHeaders(republished, { from: 'parked', unpark: true, upstreamExchange: 'webhooks.events', dispatch: 'webhooks.dispatch' })).toEqual({ 'x-upstream': 'billing' });
  });
});
