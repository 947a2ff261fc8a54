import { HEADERS, sampleEvent } from '../../libs/contracts/index.js';
import { type Database, openPostgres } from '../../libs/delivery-store/index.js';
import { FailedStore, ResendService } from '../../libs/failed/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import type { HandedWait } from '../../libs/waits/index.js';
import { type Harness, startHarness, testMerchant } from '../support/harness.js';
import { Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

/**
 * A wait's row ends (its webhook failed for good) and a new row of the same key is written later
 * (its resend fails and waits again). A hand-back of the first row still about (behind a backlog in
 * `dispatch`, or parked in `invalid` and moved back) must find no hand of the new row to take:
 * counted from the start again, the new row's first hand was the old copy's, which was taken as
 * current and sent beside the new row's own (a duplicate, with the first row's headers).
 */
describe('a stale hand-back of an ended wait, arriving once a new wait of the same key has been handed back', () => {
  let mode: 'fail' | 'slow' = 'fail';
  let receiver: Receiver;
  let harness: Harness;
  let database: Database;
  const merchant = testMerchant('m_hand_reborn', 'http://placeholder');

  beforeAll(async () => {
    // Slow: each attempt held a second, so the new row's hand-back is still out when the stale copy comes.
    receiver = await Receiver.start(() => (mode === 'fail' ? 500 : { status: 204, delayMs: 1_000 }));
    merchant.endpoints[0]!.url = receiver.url;
    harness = await startHarness({ name: 'wait-hand-reborn', merchants: [merchant], retryDelaysMs: [60_000], settings: { deliveryTimeoutMs: 5_000 } });
    // The test picks and hands back itself, so it holds a hand-back as a backlog would.
    await harness.scheduler.stop();
    database = openPostgres(harness.database.url);
  });

  afterAll(async () => {
    await database?.close();
    await harness?.close();
    await receiver?.close();
  });

  const rowOf = async (webhookId: string) => (await harness.database.query<{ hand: number }>('SELECT hand FROM webhook_waits WHERE webhook_id = $1', [webhookId]))[0];

  /** The row made due and picked, as the scheduler does: its hand-back, not yet published. */
  async function pick(webhookId: string): Promise<HandedWait> {
    await harness.database.query('UPDATE webhook_waits SET due_at = now(), pick_at = now() WHERE webhook_id = $1', [webhookId]);
    const { handed } = await harness.waits.pick(10, 60_000);
    expect(handed.map((w) => w.webhookId)).toEqual([webhookId]);
    return handed[0]!;
  }

  /** Published as the scheduler publishes a hand-back (its headers, key and hand). */
  async function handBack(wait: HandedWait): Promise<void> {
    await harness.test.publishRaw(harness.names.dispatch, wait.content, {
      messageId: wait.webhookId,
      contentType: 'application/json',
      headers: { ...wait.headers, [HEADERS.merchantId]: wait.merchantId, ...(wait.endpointId ? { [HEADERS.endpointId]: wait.endpointId } : {}), [HEADERS.waitHand]: wait.hand },
    });
  }

  it('is superseded: the resent webhook is sent once, by its own wait', async () => {
    const event = sampleEvent('payout', merchant.id);
    const reference = `PO-REBORN-${Date.now()}`;
    event.data.reference = reference;
    const { messageId: webhookId } = await harness.publisher.publish(event);
    const sent = () => receiver.requests.filter((r) => r.headers['webhook-id'] === webhookId).length;

    // The first row: its first attempt failed; its one retry handed back, failed, and the webhook with it.
    await waitFor('its retry waiting', async () => (await rowOf(webhookId)) !== undefined, 10_000);
    const stale = await pick(webhookId);
    await handBack(stale);
    await waitFor('the webhook failed for good, its wait ended', async () =>
      sent() === 2 && (await rowOf(webhookId)) === undefined &&
      (await harness.database.query('SELECT 1 FROM failed_webhooks WHERE webhook_id = $1', [webhookId])).length === 1, 10_000);

    // Resent, it fails again and waits: a new row of the same key, handed back.
    const resends = new ResendService(harness.broker, new FailedStore(database), harness.prefix, silentLogger());
    await expect(resends.resend(merchant, reference)).resolves.toBe(1);
    await waitFor("the resend's retry waiting", async () => sent() === 3 && (await rowOf(webhookId)) !== undefined, 10_000);
    mode = 'slow';
    const current = await pick(webhookId);

    // The first row's hand-back comes (a copy that sat behind a backlog), then the new row's own.
    await handBack(stale);
    await handBack(current);
    await waitFor('the resent webhook delivered, its wait ended, nothing left in dispatch', async () =>
      sent() >= 4 && (await rowOf(webhookId)) === undefined &&
      (await harness.test.messageCount(harness.names.dispatch)) === 0 && harness.dispatcher.unacked === 0, 15_000);
    expect(sent()).toBe(4);
  }, 60_000);
});
