import { OrderStore, OrderUpkeep } from '../../libs/ordering/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { openPostgres } from '../../libs/delivery-store/index.js';
import { type Harness, startHarness, testMerchant } from '../support/harness.js';
import { eventOf } from '../support/order.js';
import { createTestDatabase } from '../support/postgres.js';
import { Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

/**
 * Order per reference: a place whose head can no longer come to its end. A head given again (its
 * dispatcher's channel lost mid-attempt) and parked before it is read (`too-large`: MAX_MESSAGE_BYTES
 * lowered since its admission), or by an unexpected error before its step, ends its place with its
 * park, as any parked head does: before, its line still ordering, no upkeep released it and the
 * webhooks behind it waited for ever. An upkeep whose directory is stale (it still has order off
 * for an endpoint that orders again) does not release a line that orders: the merchants table, the
 * record, says it does. And a throttled ordered endpoint: its heads and followers wait for their
 * slots, in order, and none is failed for it.
 */

const openPlaces = (harness: Harness) => harness.database.query<{ webhook_id: string }>('SELECT webhook_id FROM webhook_order WHERE ended_at IS NULL ORDER BY seq');

/** Closes the dispatcher's consumer channels: the broker gives what they held again (a lost connection, or a killed dispatcher's). */
async function loseChannels(harness: Harness): Promise<void> {
  const channels = (harness.broker as unknown as { consumerChannels: Map<{ close(): Promise<void> }, unknown> }).consumerChannels;
  await Promise.all([...channels.keys()].map((ch) => ch.close().catch(() => {})));
}

// Side by side, each case with its own database (and harness, receiver, prefix): one after the other they
// took 13 s. Root-level cases named as their describe and case were (Jest runs only sibling concurrent cases together).
it.concurrent('an ordered head given again after MAX_MESSAGE_BYTES was lowered below its size is parked as too-large and its place ends with the park: the refund behind it is delivered', async () => {
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

it.concurrent('an ordered head given again and parked by an unexpected error before its step (the directory broke as it was routed) ends its place with the park: the refund behind it is delivered', async () => {
  const receiver = await Receiver.start((n) => (n === 0 ? 'hang' : 204));
  const merchant = testMerchant('m_order_parked_broke', receiver.url);
  merchant.endpoints[0]!.orderByReference = true;
  const harness = await startHarness({ name: 'order-parked-broke', merchants: [merchant], retryDelaysMs: [500, 500], waitLeaseMs: 1_000, settings: { deliveryTimeoutMs: 3_000, drainTimeoutMs: 500 } });
  try {
    await harness.publisher.publish(eventOf('charge.completed', merchant.id, 'TX-BROKE'), { messageId: 'evt_broke_1' });
    await receiver.waitForRequests(1, 10_000);
    await harness.publisher.publish(eventOf('refund.completed', merchant.id, 'TX-BROKE'), { messageId: 'evt_broke_2' });
    await waitFor('the refund waiting behind the charge', () => harness.dispatcher.stats.ordered === 1, 10_000);
    // The directory fails once more, on the next look-up of the merchant: the charge's copy given again, as it is routed.
    const byId = harness.merchants.byId.bind(harness.merchants);
    let armed = true;
    harness.merchants.byId = (id: string) => {
      if (id === merchant.id && armed) {
        armed = false;
        throw new Error('directory broke');
      }
      return byId(id);
    };
    await loseChannels(harness);
    await waitFor('the charge parked', () => harness.dispatcher.stats.invalid === 1, 15_000);
    expect(armed).toBe(false);
    await waitFor('the refund delivered', () => receiver.requests.some((r) => r.headers['webhook-id'] === 'evt_broke_2'), 15_000).catch(async (err: unknown) => {
      throw new Error(`${(err as Error).message}; open places: ${JSON.stringify(await openPlaces(harness))}`);
    });
    expect(receiver.requests.map((r) => r.headers['webhook-id'])).toEqual(['evt_broke_1', 'evt_broke_2']);
    const [parked] = await harness.test.drain(harness.names.invalid, 1);
    expect(parked!.properties.headers?.['x-invalid-code']).toBe('internal-error');
  } finally {
    await harness.close();
    await receiver.close();
  }
}, 60_000);

it.concurrent('an upkeep whose directory is stale: it has order off for an endpoint that orders again leaves the line an hour-old head holds (its copy behind a backlog): the merchants table says the endpoint orders', async () => {
  const database = await createTestDatabase('order_parked_stale');
  const db = openPostgres(database.url, { maxConnections: 2 });
  const endpointId = 'ep_order_stale_main';
  const endpoint = (order: boolean) => JSON.stringify([{ id: endpointId, url: 'https://merchant.example/hook', enabled: true, orderByReference: order }]);
  // The record: order on again (version 3, after off at 2); the stale directory still holds version 2.
  await database.query("INSERT INTO merchants (id, public_key, endpoints, secrets, version) VALUES ('m_order_stale', 'pk_test_order_stale', $1::jsonb, NULL, 3)", [endpoint(true)]);
  await database.query("INSERT INTO webhook_order (merchant_id, endpoint_id, order_key, webhook_id, admitted_at) VALUES ('m_order_stale', $1, 'TX-STALE', 'evt_stale_1', now() - interval '1 hour'), ('m_order_stale', $1, 'TX-STALE', 'evt_stale_2', now() - interval '1 hour')", [endpointId]);
  await database.query("INSERT INTO webhook_waits (merchant_id, webhook_id, endpoint_id, attempt, due_at, pick_at, reason, headers) VALUES ('m_order_stale', 'evt_stale_2', $1, 0, now(), NULL, 'ordered', '{}'::jsonb)", [endpointId]);
  const store = new OrderStore(db);
  // Its directory has no line that orders (order off, as at version 2).
  const upkeep = new OrderUpkeep(store, () => [], silentLogger(), { olderThanMs: 1_000, everyMs: 100 });
  try {
    upkeep.start();
    // A released place would make the refund due now, before its charge (out of order once the charge comes back).
    const released = waitFor('the head released', () => upkeep.stats.released > 0, 3_000).then(() => true, () => false);
    expect(await released).toBe(false);
    expect(await database.query("SELECT webhook_id FROM webhook_order WHERE merchant_id = 'm_order_stale' AND ended_at IS NULL ORDER BY seq")).toEqual([{ webhook_id: 'evt_stale_1' }, { webhook_id: 'evt_stale_2' }]);
    expect(await database.query("SELECT pick_at FROM webhook_waits WHERE merchant_id = 'm_order_stale'")).toEqual([{ pick_at: null }]);
    // Order off in the record too: the same stale upkeep releases the line's head, and the refund is due.
    await database.query("UPDATE merchants SET endpoints = $1::jsonb, version = 4 WHERE id = 'm_order_stale'", [endpoint(false)]);
    await waitFor('the head released', () => upkeep.stats.released === 1, 5_000);
    expect(await database.query("SELECT webhook_id FROM webhook_order WHERE merchant_id = 'm_order_stale' AND ended_at IS NULL")).toEqual([{ webhook_id: 'evt_stale_2' }]);
    expect((await database.query<{ pick_at: Date | null }>("SELECT pick_at FROM webhook_waits WHERE merchant_id = 'm_order_stale'"))[0]!.pick_at).not.toBeNull();
  } finally {
    await upkeep.stop();
    await db.close();
    await database.drop();
  }
}, 30_000);

it.concurrent('an ordered endpoint throttled at 2 a second, 6 references each a charge then its refund, published at once delivers each refund after its charge, the first charge failing once; a throttled webhook, head or not, is never failed, however long past its span it waits', async () => {
  const seen = new Set<string>();
  const receiver = await Receiver.start((_n, req) => {
    const id = String(req.headers['webhook-id']);
    if (id === 'evt_thr_0_c' && !seen.has(id)) {
      seen.add(id);
      return 500;
    }
    return 204;
  });
  const merchant = testMerchant('m_order_throttled', receiver.url);
  Object.assign(merchant.endpoints[0]!, { orderByReference: true, maxPerSecond: 2 });
  // A span of 600 ms: every webhook but the first few waits for its slot far longer.
  const harness = await startHarness({ name: 'order-throttled', merchants: [merchant], retryDelaysMs: [300, 300], throttle: true });
  try {
    const refs = [0, 1, 2, 3, 4, 5];
    for (const r of refs) await harness.publisher.publish(eventOf('charge.completed', merchant.id, `TX-THR-${r}`), { messageId: `evt_thr_${r}_c` });
    for (const r of refs) await harness.publisher.publish(eventOf('refund.completed', merchant.id, `TX-THR-${r}`), { messageId: `evt_thr_${r}_r` });
    await waitFor('every refund delivered', () => refs.every((r) => receiver.requests.some((q) => q.headers['webhook-id'] === `evt_thr_${r}_r`)), 30_000);
    const ids = receiver.requests.map((q) => String(q.headers['webhook-id']));
    for (const r of refs) expect(ids.lastIndexOf(`evt_thr_${r}_c`)).toBeLessThan(ids.indexOf(`evt_thr_${r}_r`));
    expect(harness.dispatcher.stats.failed).toBe(0);
    expect(harness.dispatcher.stats.throttled).toBeGreaterThan(0);
    expect(await harness.database.query('SELECT count(*)::int AS n FROM failed_webhooks')).toEqual([{ n: 0 }]);
    await waitFor('no wait and no open place left', async () => (await harness.waits.census(0)).waiting === 0 && (await openPlaces(harness)).length === 0, 10_000);
  } finally {
    await harness.close();
    await receiver.close();
  }
}, 60_000);
