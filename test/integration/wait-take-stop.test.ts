import { sampleEvent } from '../../libs/contracts/index.js';
import { type Harness, startHarness, testMerchant } from '../support/harness.js';
import { otherDispatcher } from '../support/other-dispatcher.js';
import { Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

const SCHEDULE = [60_000, 60_000];
/** One request at a time to the endpoint, and no deferral: a hand-back behind a request waits for its slot, taken. */
const SETTINGS = { perEndpointConcurrency: 1, maxDeferrals: 0 };

/** The dispatcher that takes over once the harness's has stopped. */
const nextDispatcher = (harness: Harness) => otherDispatcher(harness, { retryDelaysMs: SCHEDULE, userAgent: 'next', ...SETTINGS });

const takesOf = async (harness: Harness, webhookId: string) =>
  (await harness.database.query<{ takes: number }>('SELECT takes FROM webhook_waits WHERE webhook_id = $1', [webhookId]))[0]?.takes;

/**
 * A wait's takes bound the hand-backs that come to an attempt with no outcome (WAIT_TAKE_LIMIT, then
 * it is parked wait-not-ended). A dispatcher that stops gracefully gives back, untried, a hand-back it
 * took and held waiting for its endpoint's slot: that is no attempt, and its redelivered copy's take
 * must not count a second one, or rolling restarts alone walk a wait to the park.
 */
describe('a hand-back a stopping dispatcher gives back untried', () => {
  it('is counted once: its redelivered copy, taken by the next dispatcher, is not another take', async () => {
    // Its first attempt fails; the next request (another webhook) holds the endpoint's one slot; so does its retry's.
    const receiver = await Receiver.start((n) => (n === 0 ? 500 : 'hang'));
    const merchant = testMerchant('m_take_stop', receiver.url);
    const harness = await startHarness({ name: 'wait-take-stop', merchants: [merchant], retryDelaysMs: SCHEDULE, settings: SETTINGS });
    const next = nextDispatcher(harness);
    try {
      const { messageId } = await harness.publisher.publish(sampleEvent('payout', merchant.id));
      await waitFor('its retry waiting', async () => (await takesOf(harness, messageId)) === 0, 10_000);
      await harness.publisher.publish(sampleEvent('payout', merchant.id));
      await waitFor('the other webhook holding the slot', () => receiver.held === 1, 10_000);
      // Its retry due now: handed back, taken, and waiting behind the held request.
      await harness.database.query('UPDATE webhook_waits SET due_at = now(), pick_at = now()');
      await waitFor('its hand-back taken', async () => (await takesOf(harness, messageId)) === 1, 10_000);
      expect(receiver.requests).toHaveLength(2);
      const stopped = harness.dispatcher.stop();
      await waitFor('its hand-back given back to dispatch', async () => (await harness.test.messageCount(harness.names.dispatch)) === 1, 10_000);
      receiver.answerHeld(204);
      await stopped;
      await next.dispatcher.start();
      // Its redelivered copy taken and sent (held by the merchant, so its row stays to be read).
      await receiver.waitForRequests(3, 10_000);
      expect(receiver.requests[2]!.headers['webhook-id']).toBe(messageId);
      expect(await takesOf(harness, messageId)).toBe(1);
    } finally {
      await receiver.close();
      await next.close();
      await harness.close();
    }
  }, 60_000);
});
