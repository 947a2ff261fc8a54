import { HEADERS, sampleEvent } from '../../libs/contracts/index.js';
import { startHarness, testMerchant, testSecret } from '../support/harness.js';
import { Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

/**
 * Issue 56 (docs/guarantees.md, "One delivery per endpoint"): a dispatcher stopped while one
 * endpoint's delivery of a fanned-out event waits in memory (here for its throttle's slot) hands
 * that endpoint on as a copy of its own (x-endpoint-id) and acks the event: the endpoint already
 * delivered is not delivered again, and the waiting one still gets it from the copy.
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
