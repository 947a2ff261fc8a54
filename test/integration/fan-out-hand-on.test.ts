import type { Channel } from 'amqplib';
import { BrokerUnavailableError } from '../../libs/broker/index.js';
import { HEADERS, sampleEvent } from '../../libs/contracts/index.js';
import { DISPATCH_DELIVERY_LIMIT } from '../../libs/topology/index.js';
import { startHarness, testMerchant, testSecret } from '../support/harness.js';
import { Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

/**
 * Issue 56 (docs/guarantees.md, "One delivery per endpoint"): an endpoint's delivery of a
 * fanned-out event that could not be settled (the dispatcher stopped while it waited in memory,
 * here for its throttle's slot; the broker refusing its move to `failed`) is handed on as a copy
 * of its own (x-endpoint-id) and the event is acked: the endpoint already delivered is not
 * delivered again, and the other still gets it from the copy.
 */
describe('a dispatcher stopped mid-fan-out', () => {
  it('hands on the endpoint still waiting, acks the event, and sends the other endpoint nothing twice', async () => {
    const receiver = await Receiver.start(() => 204);
    const [FAST, PACED] = ['ep_stop_fast', 'ep_stop_paced'];
    const merchant = testMerchant('m_fan_stop', receiver.url, {
      endpoints: [
        { id: FAST, url: `${receiver.url}/fast`, enabled: true, secret: testSecret() },
        // One a second: the second event's delivery holds its slot in memory for up to a second.
        { id: PACED, url: `${receiver.url}/paced`, enabled: true, secret: testSecret(), maxPerSecond: 1 },
      ],
    });
    const harness = await startHarness({ name: 'fan-out-stop', merchants: [merchant], retryDelaysMs: [1_000], throttle: true });
    const at = (endpoint: 'fast' | 'paced', webhookId: string) => receiver.requests.filter((r) => r.path.endsWith(`/${endpoint}`) && r.headers['webhook-id'] === webhookId);
    try {
      await harness.publisher.publish(sampleEvent('payout', merchant.id), { messageId: 'evt_stop_1' });
      await waitFor('the first on both endpoints', () => at('fast', 'evt_stop_1').length === 1 && at('paced', 'evt_stop_1').length === 1, 10_000);
      await harness.publisher.publish(sampleEvent('payout', merchant.id), { messageId: 'evt_stop_2' });
      await waitFor('the second on the fast endpoint', () => at('fast', 'evt_stop_2').length === 1, 10_000);
      // The paced endpoint's share holds its slot, due within the second: stopped meanwhile.
      expect(at('paced', 'evt_stop_2')).toHaveLength(0);
      await harness.dispatcher.stop();
      // What is left in dispatch: the paced endpoint's copy alone, not the event (which would go to both again).
      const left = await harness.test.drain(harness.names.dispatch, 1);
      expect(left.map((m) => [m.properties.messageId, m.properties.headers?.[HEADERS.endpointId]])).toEqual([['evt_stop_2', PACED]]);
      expect(at('fast', 'evt_stop_2')).toHaveLength(1);
    } finally {
      await harness.close();
      await receiver.close();
    }
  });
});

describe('a fanned-out event whose move to failed the broker refuses for one endpoint', () => {
  it('hands that endpoint on and acks the event: the other endpoint gets it once, the failing one fails once from its copy', async () => {
    const receiver = await Receiver.start((_n, req) => (req.path.endsWith('/down') ? 500 : 204));
    const [UP, DOWN] = ['ep_refused_up', 'ep_refused_down'];
    const merchant = testMerchant('m_fan_refused', receiver.url, {
      endpoints: [
        { id: UP, url: `${receiver.url}/up`, enabled: true, secret: testSecret() },
        { id: DOWN, url: `${receiver.url}/down`, enabled: true, secret: testSecret() },
      ],
    });
    // No retries: the down endpoint's first failure is its move to failed.
    const harness = await startHarness({ name: 'fan-out-refused', merchants: [merchant], retryDelaysMs: [], settings: { moveBackoffMs: [10, 10] } });
    // The broker refuses the first three publishes to failed: the move's try and its two retries.
    const sendToQueue = harness.broker.sendToQueue.bind(harness.broker);
    let refused = 0;
    harness.broker.sendToQueue = async (queue, content, options, deadlineMs) => {
      if (queue === harness.names.failed && refused < 3) {
        refused++;
        throw new BrokerUnavailableError('refused by the test');
      }
      return sendToQueue(queue, content, options, deadlineMs);
    };
    const at = (endpoint: 'up' | 'down') => receiver.requests.filter((r) => r.path.endsWith(`/${endpoint}`) && r.headers['webhook-id'] === 'evt_refused');
    try {
      await harness.publisher.publish(sampleEvent('payout', merchant.id), { messageId: 'evt_refused' });
      // The copy's own attempt fails too, and its move is taken.
      await waitFor('the down endpoint failed', () => harness.dispatcher.stats.failed === 1, 10_000);
      expect(refused).toBe(3);
      // A second event after it, settled on both: whatever the first left behind has been taken by now.
      await harness.publisher.publish(sampleEvent('payout', merchant.id), { messageId: 'evt_refused_after' });
      await waitFor('the second event settled', () => harness.dispatcher.stats.failed === 2 && receiver.requests.some((r) => r.path.endsWith('/up') && r.headers['webhook-id'] === 'evt_refused_after'), 10_000);
      const [entry] = await harness.test.readStream(harness.names.failed, 1);
      expect([entry!.properties.messageId, entry!.properties.headers?.[HEADERS.endpointId]]).toEqual(['evt_refused', DOWN]);
      expect(at('down')).toHaveLength(2);
      expect(at('up')).toHaveLength(1);
      expect(await harness.test.messageCount(harness.names.dispatch)).toBe(0);
    } finally {
      await harness.close();
      await receiver.close();
    }
  });
});

/**
 * The review's question: a share whose park fails and whose hand-on the broker refuses returns the
 * event to dispatch (a reject with requeue). Never in an unbounded loop, never dropped: dispatch's
 * explicit delivery limit (DISPATCH_DELIVERY_LIMIT, 3.10 and 4.x alike) dead-letters the event to
 * invalid, where it is kept; each return comes after the hand-on's whole backoff. The return is a
 * basic.reject: RabbitMQ 4.3 counts a basic.nack's return toward no delivery limit, so with nacks
 * this loop had no end there (3.10, where this runs, counts both).
 */
describe('a fanned-out event one of whose shares can be neither parked nor handed on', () => {
  it('goes back to dispatch at most up to its delivery limit, then the broker parks it in invalid', async () => {
    const receiver = await Receiver.start(() => 204);
    const [UP, BROKEN] = ['ep_unparked_up', 'ep_unparked_broken'];
    const merchant = testMerchant('m_fan_unparked', receiver.url, {
      endpoints: [
        { id: UP, url: `${receiver.url}/up`, enabled: true, secret: testSecret() },
        { id: BROKEN, url: `${receiver.url}/broken`, enabled: true, secret: testSecret() },
      ],
    });
    const harness = await startHarness({ name: 'fan-out-unparked', merchants: [merchant], settings: { moveBackoffMs: [10] } });
    // A bug on the broken endpoint's walk, its park refused (a move no broker error explains), and every hand-on refused by the broker.
    const admission = (harness.dispatcher as unknown as { admission: { admit(intake: { endpointId?: string }): Promise<unknown> } }).admission;
    const admit = admission.admit.bind(admission);
    admission.admit = (intake, ...rest: unknown[]) => (intake.endpointId === BROKEN ? Promise.reject(new Error('admission broke')) : (admit as (...a: unknown[]) => Promise<unknown>)(intake, ...rest));
    const sendToQueue = harness.broker.sendToQueue.bind(harness.broker);
    harness.broker.sendToQueue = async (queue, content, options, deadlineMs) => {
      if (queue === harness.names.invalid) throw new Error('park refused');
      if (queue === harness.names.dispatch) throw new BrokerUnavailableError('hand-on refused by the test');
      return sendToQueue(queue, content, options, deadlineMs);
    };
    // How each return went to the broker: basic.nack or basic.reject, and with requeue or not.
    const returns: string[] = [];
    for (const channel of (harness.broker as unknown as { consumerChannels: Map<Channel, unknown> }).consumerChannels.keys()) {
      const [nack, reject] = [channel.nack.bind(channel), channel.reject.bind(channel)];
      channel.nack = (message, allUpTo, requeue) => (returns.push(`nack requeue=${requeue}`), nack(message, allUpTo, requeue));
      channel.reject = (message, requeue) => (returns.push(`reject requeue=${requeue}`), reject(message, requeue));
    }
    try {
      await harness.publisher.publish(sampleEvent('payout', merchant.id), { messageId: 'evt_unparked' });
      const [parked] = await harness.test.drain(harness.names.invalid, 1, 30_000);
      expect(returns.length).toBeGreaterThanOrEqual(DISPATCH_DELIVERY_LIMIT);
      expect(new Set(returns)).toEqual(new Set(['reject requeue=true']));
      expect(parked!.properties.messageId).toBe('evt_unparked');
      expect(parked!.properties.headers?.['x-first-death-reason']).toBe('delivery_limit');
      await waitFor('dispatch empty and nothing held', async () => (await harness.test.messageCount(harness.names.dispatch)) === 0 && harness.dispatcher.unacked === 0, 5_000);
      // One walk a delivery (no delivery log here to say the up endpoint was done), none to the broken endpoint.
      const up = receiver.requests.filter((r) => r.path.endsWith('/up')).length;
      expect(up).toBeGreaterThanOrEqual(1);
      expect(up).toBeLessThanOrEqual(DISPATCH_DELIVERY_LIMIT + 1);
      expect(receiver.requests.filter((r) => r.path.endsWith('/broken'))).toHaveLength(0);
    } finally {
      await harness.close();
      await receiver.close();
    }
  }, 60_000);
});
