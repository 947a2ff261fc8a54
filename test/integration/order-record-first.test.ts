import type { DeliveryRecorder } from '../../libs/delivery-log/index.js';
import { startHarness, testMerchant } from '../support/harness.js';
import { eventOf } from '../support/order.js';
import { Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

/**
 * An ordered head delivered is recorded before its place ends. The two ran together: a dispatcher
 * killed after the end committed and before the record was confirmed left the webhook sent and
 * never in the log, since its copy given again finds its place ended and is dropped as a stale copy
 * (recording nothing). Here the record is held: the place stays open, and the refund behind it
 * waits, until it is confirmed. Seen failing with the two together: the place ended at once.
 */
it('an ordered head delivered keeps its place until its record is confirmed: the next of its reference waits for the record', async () => {
  const receiver = await Receiver.start(() => 204);
  const merchant = testMerchant('m_order_record', receiver.url);
  merchant.endpoints[0]!.orderByReference = true;
  let release!: () => void;
  const held = new Promise<void>((resolve) => (release = resolve));
  const recorded: string[] = [];
  const recorder = {
    start: async () => {},
    stop: async () => {},
    record: (input: { webhookId: string }) => {
      recorded.push(input.webhookId);
      return input.webhookId === 'evt_record_1' ? held : Promise.resolve();
    },
  } as unknown as DeliveryRecorder;
  const harness = await startHarness({ name: 'order-record-first', merchants: [merchant], recorder });
  const ended = async () => (await harness.database.query<{ ended: boolean }>("SELECT ended_at IS NOT NULL AS ended FROM webhook_order WHERE webhook_id = 'evt_record_1'"))[0]?.ended;
  try {
    await harness.publisher.publish(eventOf('charge.completed', merchant.id, 'TX-RECORD'), { messageId: 'evt_record_1' });
    await harness.publisher.publish(eventOf('refund.completed', merchant.id, 'TX-RECORD'), { messageId: 'evt_record_2' });
    await waitFor('the charge delivered, its record under way', () => recorded.includes('evt_record_1'), 10_000);
    // Its place is not ended, nor the refund sent, while the record is unconfirmed (a second's watch).
    const until = Date.now() + 1_000;
    while (Date.now() < until) {
      expect(await ended()).toBe(false);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    expect(receiver.requests.map((r) => r.headers['webhook-id'])).toEqual(['evt_record_1']);
    release();
    await waitFor('the refund delivered', () => receiver.requests.length === 2, 10_000);
    expect(receiver.requests.map((r) => r.headers['webhook-id'])).toEqual(['evt_record_1', 'evt_record_2']);
    expect(await ended()).toBe(true);
  } finally {
    release();
    await harness.close();
    await receiver.close();
  }
}, 60_000);
