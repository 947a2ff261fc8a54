import type { Options } from 'amqplib';
import { BrokerUnavailableError } from '../../libs/broker/index.js';
import { HEADERS, sampleEvent } from '../../libs/contracts/index.js';
import { startHarness, testMerchant, testSecret } from '../support/harness.js';
import { Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

/**
 * x-original-routing-key is our bookkeeping: our parks write it, and a copy on dispatch that carries
 * it with no wait hand is taken for one an operator moved back from invalid (intake's `movedBack`),
 * which goes even where its place in its reference's order has ended. Upstream may publish one: the
 * dispatcher's own copy of that publish (here one endpoint's share of a fan-out, handed on) must
 * not carry it, or a second copy of the share (the broker gives it again: a move retried after a
 * lost confirm, a redelivery after a crash past its end) is sent again, outside the order, where
 * it should be dropped as superseded.
 */
describe('an upstream publish carrying x-original-routing-key, fanned out, one endpoint handed on', () => {
  it('hands on a copy taken as ours, not as moved back: that copy given again is superseded, not sent again', async () => {
    const receiver = await Receiver.start((_n, req) => (req.path.endsWith('/down') ? 500 : 204));
    const [UP, DOWN] = ['ep_rk_up', 'ep_rk_down'];
    const merchant = testMerchant('m_fan_rk', receiver.url, {
      endpoints: [
        { id: UP, url: `${receiver.url}/up`, enabled: true, secret: testSecret() },
        { id: DOWN, url: `${receiver.url}/down`, enabled: true, secret: testSecret(), orderByReference: true },
      ],
    });
    // No retries: the down endpoint's first failure is its move to failed.
    const harness = await startHarness({ name: 'fan-out-routing-key', merchants: [merchant], retryDelaysMs: [], settings: { moveBackoffMs: [10, 10] } });
    // The broker refuses the first three publishes to failed (the move's try and its two retries):
    // the down endpoint's share is handed on. Its copy is kept, to be given again.
    const sendToQueue = harness.broker.sendToQueue.bind(harness.broker);
    let refused = 0;
    const handedOn: { content: Buffer; options: Options.Publish }[] = [];
    harness.broker.sendToQueue = async (queue, content, options, deadlineMs) => {
      if (queue === harness.names.failed && refused < 3) {
        refused++;
        throw new BrokerUnavailableError('refused by the test');
      }
      if (queue === harness.names.dispatch) handedOn.push({ content, options: { ...options } });
      return sendToQueue(queue, content, options, deadlineMs);
    };
    const at = (endpoint: 'up' | 'down') => receiver.requests.filter((r) => r.path.endsWith(`/${endpoint}`) && r.headers['webhook-id'] === 'evt_rk');
    try {
      const ch = await harness.test.connection.createConfirmChannel();
      ch.publish(harness.names.events, 'payout', Buffer.from(JSON.stringify(sampleEvent('payout', merchant.id))), {
        persistent: true,
        contentType: 'application/json',
        messageId: 'evt_rk',
        headers: { [HEADERS.originalRoutingKey]: 'payout' },
      });
      await ch.waitForConfirms();
      await ch.close();
      // The handed-on copy's own attempt fails too, and its move to failed is taken: its place ends.
      await waitFor('the down endpoint failed', () => harness.dispatcher.stats.failed === 1, 10_000);
      expect(handedOn).toHaveLength(1);
      expect(at('down')).toHaveLength(2);
      expect(at('up')).toHaveLength(1);
      // The broker gives the handed-on copy again: its place ended, it is a copy of one already done.
      const again = handedOn[0]!;
      await harness.test.publishRaw(harness.names.dispatch, again.content, again.options);
      await waitFor('the copy given again settled', async () =>
        harness.dispatcher.stats.superseded + harness.dispatcher.stats.failed === 2 && (await harness.test.messageCount(harness.names.dispatch)) === 0 && harness.dispatcher.unacked === 0, 10_000);
      expect({ superseded: harness.dispatcher.stats.superseded, failed: harness.dispatcher.stats.failed, down: at('down').length }).toEqual({ superseded: 1, failed: 1, down: 2 });
    } finally {
      await harness.close();
      await receiver.close();
    }
  });
});
