import { type Harness, startHarness, testMerchant } from '../support/harness.js';
import { eventOf } from '../support/order.js';
import { Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

/**
 * Order per reference: a place whose head can no longer come to its end. A head given again (its
 * dispatcher's channel lost mid-attempt) and parked before it is read (`too-large`: MAX_MESSAGE_BYTES
 * lowered since its admission) ends its place with its park, as any parked head does: before, its
 * line still ordering, no upkeep released it and the webhooks behind it waited for ever.
 */

const openPlaces = (harness: Harness) => harness.database.query<{ webhook_id: string }>('SELECT webhook_id FROM webhook_order WHERE ended_at IS NULL ORDER BY seq');

/** Closes the dispatcher's consumer channels: the broker gives what they held again (a lost connection, or a killed dispatcher's). */
async function loseChannels(harness: Harness): Promise<void> {
  const channels = (harness.broker as unknown as { consumerChannels: Map<{ close(): Promise<void> }, unknown> }).consumerChannels;
  await Promise.all([...channels.keys()].map((ch) => ch.close().catch(() => {})));
}

describe('an ordered head given again after MAX_MESSAGE_BYTES was lowered below its size', () => {
  it('is parked as too-large and its place ends with the park: the refund behind it is delivered', async () => {
    const receiver = await Receiver.start((n) => (n === 0 ? 'hang' : 204));
    const merchant = testMerchant('m_order_parked_large', receiver.url);
    merchant.endpoints[0]!.orderByReference = true;
    const harness = await startHarness({ name: 'order-parked-large', merchants: [merchant], retryDelaysMs: [500, 500], waitLeaseMs: 1_000, settings: { deliveryTimeoutMs: 3_000, drainTimeoutMs: 500 } });
    try {
      const charge = eventOf('charge.completed', merchant.id, 'TX-LARGE');
      await harness.publisher.publish({ ...charge, data: { ...charge.data, narration: 'x'.repeat(8_000) } }, { messageId: 'evt_large_1' });
      await receiver.waitForRequests(1, 10_000);
      await harness.publisher.publish(eventOf('refund.completed', merchant.id, 'TX-LARGE'), { messageId: 'evt_large_2' });
      await waitFor('the refund waiting behind the charge', () => harness.dispatcher.stats.ordered === 1, 10_000);
      // The limit lowered (a restart with a smaller MAX_MESSAGE_BYTES): the charge is over it, the refund not.
      (harness.dispatcher as unknown as { settings: { maxMessageBytes: number } }).settings.maxMessageBytes = 4_096;
      await loseChannels(harness);
      await waitFor('the charge parked', () => harness.dispatcher.stats.invalid === 1, 15_000);
      await waitFor('the refund delivered', () => receiver.requests.some((r) => r.headers['webhook-id'] === 'evt_large_2'), 15_000).catch(async (err: unknown) => {
        throw new Error(`${(err as Error).message}; open places: ${JSON.stringify(await openPlaces(harness))}`);
      });
      expect(receiver.requests.map((r) => r.headers['webhook-id'])).toEqual(['evt_large_1', 'evt_large_2']);
      expect(await harness.test.messageCount(harness.names.invalid)).toBe(1);
      await waitFor('no wait and no open place left', async () => (await harness.waits.census(0)).waiting === 0 && (await openPlaces(harness)).length === 0, 10_000);
    } finally {
      await harness.close();
      await receiver.close();
    }
  }, 60_000);
});
