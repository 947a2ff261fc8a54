import { writeFileSync } from 'node:fs';
import { HEADERS, sampleEvent } from '../../libs/contracts/index.js';
import type { DeliveryRecorder } from '../../libs/delivery-log/index.js';
import { startHarness, testMerchant } from '../support/harness.js';
import { failOnceThenSucceed, Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

/**
 * Waits are rows (issue 54): the row is the one copy that decides, so what the retry safety net
 * got wrong cannot happen. Each test here was seen failing on a broken variant (see the report of
 * the change that added them).
 */
describe('a wait made by a deferral, behind a dispatch backlog, then a disable', () => {
  it('ends failed and resendable: its hand-back is accepted from the row, stale copies are dropped, nothing is skipped', async () => {
    const receiver = await Receiver.start(() => 204);
    const merchant = testMerchant('m_deferred', receiver.url);
    // Paused: its hand-backs pile up in dispatch, and a short lease hands the same row on again.
    const harness = await startHarness({ name: 'waits-loss', merchants: [merchant], retryDelaysMs: [60_000], waitLeaseMs: 1_000, paused: true });
    try {
      const event = sampleEvent('payout', merchant.id);
      const content = Buffer.from(JSON.stringify(event));
      const webhookId = 'evt_deferred_1';
      // The wait a busy endpoint's deferral writes: no attempt yet, one deferral, due now.
      await harness.waits.write(
        [{ merchantId: merchant.id, webhookId, hand: 0, attempt: 0, delayMs: 0, reason: 'endpoint-busy', content, spanLeftMs: 3_600_000,
          headers: { [HEADERS.attempts]: 0, [HEADERS.deferrals]: 1, [HEADERS.postponements]: 0, [HEADERS.webhookId]: webhookId, [HEADERS.firstSeenAt]: new Date().toISOString() } }],
        [],
      );
      await waitFor('two hand-backs of the one row in dispatch', async () => (await harness.test.messageCount(harness.names.dispatch)) >= 2, 15_000);
      writeFileSync(harness.merchantsFile, JSON.stringify({ merchants: [{ ...merchant, webhook: { ...merchant.webhook!, enabled: false } }] }));
      expect(harness.merchants.reload()).toBe(true);
      await harness.startDispatcher();

      const [entry] = await harness.test.readStream(harness.names.failed, 1, 15_000);
      expect(entry!.properties.messageId).toBe(webhookId);
      expect(entry!.properties.headers![HEADERS.failedReason]).toBe('webhook-disabled');
      expect(entry!.content.equals(content)).toBe(true);
      await waitFor('resendable', async () => (await harness.database.query('SELECT 1 FROM failed_webhooks WHERE webhook_id = $1', [webhookId])).length === 1, 10_000);
      await waitFor('the stale copies dropped', async () => (await harness.test.messageCount(harness.names.dispatch)) === 0 && harness.dispatcher.stats.superseded >= 1, 10_000);
      expect(harness.dispatcher.stats.skipped).toBe(0);
      expect(harness.dispatcher.stats.failed).toBe(1);
      expect((await harness.waits.census(0)).waiting).toBe(0);
      expect(receiver.requests).toHaveLength(0);
    } finally {
      await harness.close();
      await receiver.close();
    }
  });
});

describe('a retry delivered while the delivery log loses every record', () => {
  it('is not sent again: its wait ended with its delivery', async () => {
    const receiver = await Receiver.start(failOnceThenSucceed());
    const merchant = testMerchant('m_no_records', receiver.url);
    // The deliveries stream without a leader: every record is refused.
    const lost = { start: async () => {}, stop: async () => {}, record: () => Promise.reject(new Error('the deliveries stream has no leader')) } as unknown as DeliveryRecorder;
    const harness = await startHarness({ name: 'waits-records', merchants: [merchant], retryDelaysMs: [200], waitLeaseMs: 500, recorder: lost });
    try {
      const { messageId } = await harness.publisher.publish(sampleEvent('payout', merchant.id));
      await receiver.waitForRequests(2, 15_000);
      await waitFor('delivered', () => harness.dispatcher.stats.delivered === 1, 10_000);
      expect(harness.dispatcher.recordsLost).toBeGreaterThanOrEqual(2);
      await waitFor('its wait gone', async () => (await harness.waits.census(0)).waiting === 0, 10_000);
      // Four leases and more: a wait the delivery had not ended would have been handed on by now.
      const handed = harness.scheduler.stats.handed;
      await new Promise((resolve) => setTimeout(resolve, 3_000));
      expect(harness.scheduler.stats.handed).toBe(handed);
      expect(receiver.requests.map((r) => r.headers['webhook-id'])).toEqual([messageId, messageId]);
      // The same bytes on the retry as on the first attempt.
      expect(receiver.requests[1]!.body).toBe(receiver.requests[0]!.body);
    } finally {
      await harness.close();
      await receiver.close();
    }
  });
});
