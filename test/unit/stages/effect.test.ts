import { EffectStage } from '../../../apps/dispatcher/stages/effect.js';
import type { IntakeEvent } from '../../../apps/dispatcher/stages/intake.js';
import { HEADERS } from '../../../libs/contracts/index.js';
import type { OrderGate } from '../../../libs/ordering/index.js';
import { WriteRefusedError } from '../../../libs/runtime/index.js';
import { silentLogger } from '../../../libs/logger/index.js';
import { noopObserver } from '../../../libs/metrics/index.js';
import { RetryPolicy } from '../../../libs/retry-policy/index.js';
import { topologyNames } from '../../../libs/topology/index.js';
import type { WaitEnd, WaitPut, WaitWriter } from '../../../libs/waits/index.js';
import { fakeBroker, fakeDelivery } from './fakes.js';

const now = new Date('2026-01-01T12:00:00.000Z');
const names = topologyNames('p');
const intake: IntakeEvent = {
  merchantId: 'm_1', event: 'charge.completed', references: ['ref_1', 'tnx_1'], body: '{}', webhookId: 'evt_1',
  attempts: 1, deferrals: 0, postponements: 0, firstSeenAt: '2026-01-01T11:59:00.000Z', accepted: true,
};

function stage(refuse = 0, only?: string, moveBackoffMs = [1], order?: OrderGate) {
  const { broker, published } = fakeBroker(refuse, only);
  const waits: { puts: WaitPut[]; ends: WaitEnd[] } = { puts: [], ends: [] };
  const writer = {
    put: async (wait: WaitPut) => void waits.puts.push(wait),
    end: async (wait: WaitEnd) => void waits.ends.push(wait),
  } as unknown as WaitWriter;
  const effect = new EffectStage({
    broker, names, policy: new RetryPolicy({ delaysMs: [1_000, 10_000] }), logger: silentLogger(), observer: noopObserver,
    now: () => now, moveBackoffMs, stopping: () => false, waits: writer, order,
  });
  return { effect, published, waits };
}

describe('effect', () => {
  it('acks a delivered webhook and publishes nothing', async () => {
    const { effect, published } = stage();
    const delivery = fakeDelivery({});
    await effect.apply(delivery, intake, { kind: 'delivered', attempt: 2, status: 200 }, now);
    expect([delivery.settled, published.length, effect.stats.delivered]).toEqual([['ack'], 0, 1]);
  });

  it('writes a retry as a wait with the attempt headers, its bytes and its delay, publishes nothing, then records and acks', async () => {
    const { effect, published, waits } = stage();
    const delivery = fakeDelivery({}, { headers: { 'x-upstream': 'billing', [HEADERS.waitHand]: 3, 'x-delivery-count': 2 } }, '');
    const order: string[] = [];
    await effect.apply(delivery, intake, { kind: 'retry', step: 1, attempt: 2, error: 'HTTP 500', errorClass: 'http_500', status: 500 }, now, undefined, async () => {
      order.push(`record after ${waits.puts.length} wait`);
    });
    expect(published).toEqual([]);
    expect(waits.puts).toHaveLength(1);
    const wait = waits.puts[0]!;
    expect(wait).toMatchObject({ merchantId: 'm_1', webhookId: 'evt_1', hand: 0, attempt: 2, delayMs: 10_000, reason: 'retry' });
    expect(wait.content).toBe(delivery.message.content);
    expect(wait.headers).toMatchObject({ 'x-upstream': 'billing', [HEADERS.attempts]: 2, [HEADERS.lastStatus]: 500, [HEADERS.lastError]: 'HTTP 500', [HEADERS.tnxRef]: 'tnx_1', [HEADERS.webhookId]: 'evt_1' });
    expect(wait.headers[HEADERS.waitHand]).toBeUndefined();
    expect(wait.headers['x-delivery-count']).toBeUndefined();
    expect(order).toEqual(['record after 1 wait']);
    expect(delivery.settled).toEqual(['ack']);
  });

  it('rewrites the wait of a hand-back (its hand, no bytes again) and ends it when its attempt is delivered', async () => {
    const { effect, waits } = stage();
    await effect.apply(fakeDelivery({}), { ...intake, hand: 4 }, { kind: 'defer', step: 0 }, now);
    expect(waits.puts[0]).toMatchObject({ hand: 4, attempt: 1, reason: 'endpoint-busy', content: undefined });
    await effect.apply(fakeDelivery({}), { ...intake, hand: 5 }, { kind: 'delivered', attempt: 2, status: 200 }, now);
    expect(waits.ends).toEqual([{ merchantId: 'm_1', webhookId: 'evt_1', endpointId: '', hand: 5, closesCircuit: true }]);
  });

  it("acks an ordered hand-back delivered whose place PostgreSQL refuses to end, and keeps its wait (handed back, parked after WAIT_TAKE_LIMIT takes)", async () => {
    const ends: string[] = [];
    const order = { end: async (place: { webhookId: string }) => {
      ends.push(place.webhookId);
      throw new WriteRefusedError(new Error('new row violates check constraint'));
    } } as unknown as OrderGate;
    const { effect, waits } = stage(0, undefined, [1], order);
    const delivery = fakeDelivery({});
    await effect.apply(delivery, { ...intake, ordered: true, hand: 3 }, { kind: 'delivered', attempt: 2, status: 200 }, now);
    expect([ends, delivery.settled, waits.ends.length, effect.stats.delivered]).toEqual([['evt_1'], ['ack'], 0, 1]);
  });

  it('records a failure only once it is in failed: a move that gives up records nothing and ends no wait', async () => {
    const { effect, waits } = stage(10, undefined, []);
    const delivery = fakeDelivery({});
    let recorded = 0;
    await effect.apply(delivery, { ...intake, hand: 2 }, { kind: 'failed', reason: 'attempts-exhausted', attempts: 3, error: 'HTTP 500', attempted: true }, now, undefined, async () => void recorded++);
    expect(delivery.settled).toEqual(['requeue']);
    expect([recorded, waits.ends.length, effect.stats.failed]).toEqual([0, 0, 0]);
  });

  it('writes a failure entry through libs/failed: no earlier status, the reason and no attempt time for an attempt-less failure', async () => {
    const { effect, published } = stage();
    const delivery = fakeDelivery({}, { headers: { [HEADERS.lastStatus]: 502, [HEADERS.attempts]: 1 } }, '');
    await effect.apply(delivery, intake, { kind: 'failed', reason: 'webhook-disabled', attempts: 1, error: 'webhook disabled', attempted: false }, now);
    const headers = published[0]!.options.headers!;
    expect(published[0]!.queue).toBe(names.failed);
    expect(headers).toMatchObject({ [HEADERS.entryType]: 'failure', [HEADERS.failedReason]: 'webhook-disabled', [HEADERS.failedAt]: now.toISOString() });
    expect(headers[HEADERS.lastStatus]).toBeUndefined();
    expect(headers[HEADERS.lastAttemptAt]).toBeUndefined();
    expect(delivery.settled).toEqual(['ack']);
  });

  it('parks an invalid message with its code and original routing key', async () => {
    const { effect, published } = stage();
    const delivery = fakeDelivery('not json');
    await effect.apply(delivery, undefined, { kind: 'invalid', code: 'not-json', detail: 'body is not JSON' }, now);
    expect(published[0]!.queue).toBe(names.invalid);
    expect(published[0]!.options.headers).toMatchObject({ [HEADERS.invalidCode]: 'not-json', [HEADERS.invalidReason]: 'not-json: body is not JSON', [HEADERS.originalRoutingKey]: 'charge.completed' });
  });

  it('retries a refused move, then hands the delivery back once and counts it requeued', async () => {
    const { effect, published } = stage(5);
    const delivery = fakeDelivery({});
    await effect.apply(delivery, undefined, { kind: 'invalid', code: 'not-json', detail: 'body is not JSON' }, now);
    expect([published.length, delivery.settled, effect.stats.requeued, effect.stats.invalid]).toEqual([0, ['requeue'], 1, 0]);
  });

  it('returns a delivery untried when stopping, and acks a superseded copy', async () => {
    const { effect } = stage();
    const returned = fakeDelivery({});
    await effect.apply(returned, intake, { kind: 'returned' }, now);
    const superseded = fakeDelivery({});
    await effect.apply(superseded, undefined, { kind: 'superseded', key: 's_1' }, now);
    expect([returned.settled, superseded.settled, effect.stats.superseded]).toEqual([['requeue'], ['ack'], 1]);
  });
});
