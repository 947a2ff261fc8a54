import { parkedOf } from '../../apps/cli/invalid.js';
import { sampleEvent } from '../../libs/contracts/index.js';
import { startHarness, testMerchant } from '../support/harness.js';
import { Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

/**
 * An unexpected error whose park fails too: the message was requeued (nack with requeue), met the
 * same error and the same failing park at once, and went round up to the delivery limit (on 4.x
 * without one, 20 returns and dropped). Never requeued in a loop: the broker dead-letters it.
 */
describe('a message whose park fails after an unexpected error', () => {
  it('is delivered once and dead-lettered to invalid by the broker, not requeued round the delivery limit', async () => {
    const receiver = await Receiver.start(() => 204);
    const merchant = testMerchant('m_park_refused', receiver.url);
    const harness = await startHarness({ name: 'park-refused', merchants: [merchant], settings: { moveBackoffMs: [50] } });
    try {
      // A bug-class error in intake, on every delivery of it: counted, one a delivery.
      let deliveries = 0;
      Object.defineProperty((harness.dispatcher as unknown as { settings: object }).settings, 'maxMessageBytes', {
        get: () => {
          deliveries++;
          throw new Error('intake broke');
        },
      });
      // And its park throws: the move to invalid fails as no move expects.
      const send = harness.broker.sendToQueue.bind(harness.broker);
      harness.broker.sendToQueue = (queue, content, options, deadlineMs) =>
        queue === harness.names.invalid ? Promise.reject(new Error('park refused')) : send(queue, content, options, deadlineMs);

      const { messageId } = await harness.publisher.publish(sampleEvent('payout', merchant.id));
      await waitFor('the message in invalid', async () => (await harness.test.messageCount(harness.names.invalid)) >= 1, 15_000);
      await waitFor('dispatch empty and nothing held', async () => (await harness.test.messageCount(harness.names.dispatch)) === 0 && harness.dispatcher.unacked === 0, 5_000);
      expect(deliveries).toBe(1);
      const [parked] = await harness.test.drain(harness.names.invalid, 1);
      expect(parked!.properties.messageId).toBe(messageId);
      expect(parked!.properties.headers?.['x-first-death-reason']).toBe('rejected');
      // What `webhooks invalid list` shows for it.
      expect(parkedOf(parked!, harness.names)).toMatchObject({ code: 'internal-error', messageId, invalidAt: expect.any(String) });
      expect(receiver.requests).toHaveLength(0);
    } finally {
      await harness.close();
      await receiver.close();
    }
  }, 30_000);
});
