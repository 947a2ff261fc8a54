import { HEADERS } from '../../libs/contracts/index.js';
import { startHarness, testMerchant } from '../support/harness.js';
import { eventOf } from '../support/order.js';
import { Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

/**
 * Order per reference: a resend's copy is outside the order, and its first wait takes over the row
 * of an earlier send of its webhook, here an 'ordered' wait behind the head. Seen failing when the
 * takeover wrote the row unmarked (no x-ordered; libs/waits/store.ts WRITE before its CASE, and any
 * resent hand-back read as unordered in intake.ts): the resend's wait ended with its delivery, the
 * place stayed with no wait, and when the head ended nothing was woken: the next waited for ever.
 */
it("a resend whose first wait takes over its webhook's 'ordered' wait ends the webhook's place with that wait: the webhook behind it goes once the head ends", async () => {
  const tries = new Map<string, number>();
  const receiver = await Receiver.start((_n, req) => {
    const id = String(req.headers['webhook-id']);
    tries.set(id, (tries.get(id) ?? 0) + 1);
    if (id === 'evt_rw_head') return 'hang';
    // The resend's first attempt fails: it waits for its retry.
    return id === 'evt_rw_resent' && tries.get(id) === 1 ? 500 : 204;
  });
  const merchant = testMerchant('m_order_resend_wait', receiver.url);
  merchant.endpoints[0]!.orderByReference = true;
  const harness = await startHarness({ name: 'order-resend-wait', merchants: [merchant], retryDelaysMs: [300, 300], settings: { deliveryTimeoutMs: 10_000, drainTimeoutMs: 500 } });
  try {
    await harness.publisher.publish(eventOf('charge.completed', merchant.id, 'TX-RW'), { messageId: 'evt_rw_head' });
    await receiver.waitForRequests(1, 10_000);
    // Its earlier send failed (resendable); published again past the intake window, it takes a place
    // behind the head, an 'ordered' wait; then the next of the reference.
    const resent = eventOf('refund.completed', merchant.id, 'TX-RW');
    await harness.publisher.publish(resent, { messageId: 'evt_rw_resent' });
    await harness.publisher.publish(eventOf('refund.completed', merchant.id, 'TX-RW'), { messageId: 'evt_rw_next' });
    await waitFor('both waiting behind the head', () => harness.dispatcher.stats.ordered === 2, 10_000);
    // The merchant resends its old failure: the copy the API publishes straight to dispatch.
    await harness.test.publishRaw(harness.names.dispatch, Buffer.from(JSON.stringify(resent)), {
      messageId: 'evt_rw_resent',
      contentType: 'application/json',
      headers: { [HEADERS.resentAt]: new Date().toISOString(), [HEADERS.resend]: 1, [HEADERS.endpointId]: merchant.endpoints[0]!.id },
    });
    await waitFor('the resend delivered by its retry', () => tries.get('evt_rw_resent') === 2 && harness.dispatcher.stats.delivered === 1, 10_000);
    receiver.answerHeld(204);
    await waitFor('the next delivered', () => tries.has('evt_rw_next'), 10_000).catch(async (err: unknown) => {
      const places = await harness.database.query('SELECT webhook_id, ended_at FROM webhook_order ORDER BY seq');
      const waits = await harness.database.query('SELECT webhook_id, reason, pick_at FROM webhook_waits');
      throw new Error(`${(err as Error).message}; places: ${JSON.stringify(places)}; waits: ${JSON.stringify(waits)}`);
    });
    expect(receiver.requests.map((r) => r.headers['webhook-id'])).toEqual(['evt_rw_head', 'evt_rw_resent', 'evt_rw_resent', 'evt_rw_next']);
    await waitFor('no wait and no open place left', async () =>
      (await harness.waits.census(0)).waiting === 0 && (await harness.database.query('SELECT 1 FROM webhook_order WHERE ended_at IS NULL')).length === 0, 10_000);
  } finally {
    await harness.close();
    await receiver.close();
  }
}, 60_000);
