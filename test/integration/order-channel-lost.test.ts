import { startHarness, testMerchant } from '../support/harness.js';
import { eventOf } from '../support/order.js';
import { Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

/**
 * Order per reference: a head whose broker channel closes during its POST leaves its place to the
 * copy the broker gives again (admitted as head too, and sent). Seen failing when the effect ended
 * the place on the lost copy's 2xx (effect.ts without the `live` check in endWait): the place was
 * ended while the copy given again was still in flight, and the refund was sent before its answer.
 */
it('a head whose channel closes during its POST does not end its place: the refund behind it goes only after the copy the broker gave again is answered', async () => {
  // The charge's first request is answered late (2xx), the copy given again is held until the test answers it.
  const charges: number[] = [];
  const receiver = await Receiver.start((n, req) => {
    if (req.headers['webhook-id'] !== 'evt_lost_1') return 204;
    charges.push(n);
    return charges.length === 1 ? { status: 204, delayMs: 2_500 } : 'hang';
  });
  const merchant = testMerchant('m_order_lost', receiver.url);
  merchant.endpoints[0]!.orderByReference = true;
  const harness = await startHarness({ name: 'order-channel-lost', merchants: [merchant], settings: { deliveryTimeoutMs: 10_000, drainTimeoutMs: 500 } });
  try {
    await harness.publisher.publish(eventOf('charge.completed', merchant.id, 'TX-LOST'), { messageId: 'evt_lost_1' });
    await receiver.waitForRequests(1, 10_000);
    await harness.publisher.publish(eventOf('refund.completed', merchant.id, 'TX-LOST'), { messageId: 'evt_lost_2' });
    await waitFor('the refund waiting behind the charge', () => harness.dispatcher.stats.ordered === 1, 10_000);
    // A missed heartbeat or a lost node: the dispatcher's channel closes, the broker gives the charge again.
    const channels = (harness.broker as unknown as { consumerChannels: Map<{ close(): Promise<void> }, unknown> }).consumerChannels;
    await Promise.all([...channels.keys()].map((ch) => ch.close().catch(() => {})));
    await waitFor('the charge sent again', () => charges.length === 2, 10_000);
    // Else the copy given again came after the first answer, and the case is not the one tested.
    expect(harness.dispatcher.stats.delivered).toBe(0);
    await waitFor("the lost copy's 2xx settled", () => harness.dispatcher.stats.delivered === 1, 10_000);
    expect(await harness.database.query("SELECT ended_at FROM webhook_order WHERE webhook_id = 'evt_lost_1'")).toEqual([{ ended_at: null }]);
    expect(receiver.requests.map((r) => r.headers['webhook-id'])).toEqual(['evt_lost_1', 'evt_lost_1']);
    receiver.answerHeld(204);
    await waitFor('the refund delivered', () => receiver.requests.length === 3, 10_000);
    expect(receiver.requests.map((r) => r.headers['webhook-id'])).toEqual(['evt_lost_1', 'evt_lost_1', 'evt_lost_2']);
    await waitFor('no wait left', async () => (await harness.waits.census(0)).waiting === 0, 10_000);
  } finally {
    await harness.close();
    await receiver.close();
  }
}, 60_000);
