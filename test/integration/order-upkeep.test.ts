import type { Merchant } from '../../libs/merchants/index.js';
import { OrderGate } from '../../libs/ordering/index.js';
import { type Harness, startHarness, testMerchant } from '../support/harness.js';
import { eventOf, headGivenAgain } from '../support/order.js';
import { Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

/**
 * Order per reference: a place whose end was never written, its webhook gone for good, is ended by
 * the rows (the upkeep in libs/ordering/upkeep.ts): the webhook behind it goes. A copy given again
 * after its endpoint stopped ordering (order off, disabled, deleted) looks its place up, and when
 * PostgreSQL did not answer within 2 s it was sent (or skipped) with its place left open: the
 * webhooks behind it waited for ever. PostgreSQL's silence is the gate's look-ups rejecting, as
 * within(…, 'reject') rejects them. A healthy head is never ended: neither while it is in flight, however
 * the directory changed, nor, old, while its endpoint still orders.
 */

/** The harness's bound (OrderUpkeep's olderThanMs): the wait lease, at least twice the delivery timeout. */
const DELIVERY_TIMEOUT_MS = 3_000;
const BOUND_MS = 2 * DELIVERY_TIMEOUT_MS;

type Endpoints = Merchant['endpoints'];

/** PostgreSQL not answering the look-ups of a redelivered copy's places, as they time out. */
function lookupsTimeOut(harness: Harness): void {
  const gate = (harness.dispatcher as unknown as { deps: { order: { holds(): Promise<boolean>; openPlaces(): Promise<string[]> } } }).deps.order;
  gate.holds = () => Promise.reject(new Error('timed out after 2000 ms'));
  gate.openPlaces = () => Promise.reject(new Error('timed out after 2000 ms'));
}

/** headGivenAgain (test/support/order.ts) of TX-LOST, whose look-ups of its place then time out. */
const endLost = (name: string, change: (endpoint: Endpoints[number]) => Endpoints) =>
  headGivenAgain(name, change, {
    reference: 'TX-LOST',
    ids: ['evt_lost_1', 'evt_lost_2'],
    options: { retryDelaysMs: [500, 500], waitLeaseMs: 1_000, settings: { deliveryTimeoutMs: DELIVERY_TIMEOUT_MS, drainTimeoutMs: 500 } },
    prepare: lookupsTimeOut,
  });

const openPlaces = (harness: Harness) => harness.database.query<{ webhook_id: string }>('SELECT webhook_id FROM webhook_order WHERE ended_at IS NULL ORDER BY seq');

// Side by side, each case with a harness of its own (prefix, database, receiver, merchants file): three of
// them wait out the bound, and one after the other they took 30 s. Root-level cases named as their
// describe and case were (Jest runs only sibling concurrent cases together).
it.concurrent('a charge given again after its endpoint turned order off, its place not looked up (PostgreSQL silent) is sent with its place left open; the upkeep ends that place, and the refund behind it is delivered within the bound', async () => {
  const { receiver, harness } = await endLost('order-upkeep-off', (endpoint) => [{ ...endpoint, orderByReference: false }]);
  try {
    await waitFor('the charge sent again, unordered', () => receiver.requests.length === 2, 15_000);
    const sentAgain = Date.now();
    // Before the upkeep: its place stayed open and the refund waited with no pick time, for ever.
    await waitFor('the refund delivered', () => receiver.requests.some((r) => r.headers['webhook-id'] === 'evt_lost_2'), BOUND_MS + 15_000).catch(async (err: unknown) => {
      throw new Error(`${(err as Error).message}; open places: ${JSON.stringify(await openPlaces(harness))}`);
    });
    expect(Date.now() - sentAgain).toBeLessThan(BOUND_MS + 10_000);
    expect(receiver.requests.map((r) => r.headers['webhook-id'])).toEqual(['evt_lost_1', 'evt_lost_1', 'evt_lost_2']);
    await waitFor('no wait and no open place left', async () => (await harness.waits.census(0)).waiting === 0 && (await openPlaces(harness)).length === 0, 10_000);
  } finally {
    await harness.close();
    await receiver.close();
  }
}, 60_000);

it.concurrent('a charge given again after its endpoint was deleted, its places not looked up (PostgreSQL silent) is skipped with its place left open; the upkeep ends it, and the refund behind it goes to failed', async () => {
  const { receiver, harness } = await endLost('order-upkeep-deleted', () => []);
  try {
    await waitFor('the refund failed', async () => (await harness.database.query('SELECT 1 FROM failed_webhooks WHERE webhook_id = $1', ['evt_lost_2'])).length === 1, BOUND_MS + 20_000).catch(async (err: unknown) => {
      throw new Error(`${(err as Error).message}; open places: ${JSON.stringify(await openPlaces(harness))}`);
    });
    expect(receiver.requests).toHaveLength(1);
    await waitFor('no wait and no open place left', async () => (await harness.waits.census(0)).waiting === 0 && (await openPlaces(harness)).length === 0, 10_000);
  } finally {
    await harness.close();
    await receiver.close();
  }
}, 60_000);

it.concurrent('a charge given again after its endpoint was disabled, its places not looked up (PostgreSQL silent) is skipped with its place left open; the upkeep ends it, and the refund behind it goes to failed', async () => {
  const { receiver, harness } = await endLost('order-upkeep-disabled', (endpoint) => [{ ...endpoint, enabled: false, disabledReason: 'manual' }]);
  try {
    await waitFor('the refund failed', async () => (await harness.database.query('SELECT 1 FROM failed_webhooks WHERE webhook_id = $1', ['evt_lost_2'])).length === 1, BOUND_MS + 20_000).catch(async (err: unknown) => {
      throw new Error(`${(err as Error).message}; open places: ${JSON.stringify(await openPlaces(harness))}`);
    });
    expect(receiver.requests).toHaveLength(1);
  } finally {
    await harness.close();
    await receiver.close();
  }
}, 60_000);

it.concurrent('a charge given again after its ordered endpoint stopped taking charges, its places looked up late (PostgreSQL silent, then back) holds the copy until its places are looked up and ends its place there: the refund behind it is delivered', async () => {
  // The endpoint still orders, so no upkeep releases its places: given up after 2 s, the place stayed open for ever.
  const { receiver, harness } = await endLost('order-upkeep-unsubscribed', (endpoint) => [{ ...endpoint, events: ['refund.completed'] }]);
  const gate = (harness.dispatcher as unknown as { deps: { order: { openPlaces(...args: unknown[]): Promise<string[]> } } }).deps.order;
  const openPlacesOf = OrderGate.prototype.openPlaces;
  let silent = 3;
  gate.openPlaces = function (this: unknown, ...args: unknown[]) {
    return silent-- > 0 ? Promise.reject(new Error('timed out after 2000 ms')) : openPlacesOf.apply(this as OrderGate, args as Parameters<OrderGate['openPlaces']>);
  };
  try {
    await waitFor('the refund delivered', () => receiver.requests.some((r) => r.headers['webhook-id'] === 'evt_lost_2'), 20_000).catch(async (err: unknown) => {
      throw new Error(`${(err as Error).message}; open places: ${JSON.stringify(await openPlaces(harness))}`);
    });
    expect(silent).toBeLessThan(0);
    expect(receiver.requests.map((r) => r.headers['webhook-id'])).toEqual(['evt_lost_1', 'evt_lost_2']);
    await waitFor('no wait and no open place left', async () => (await harness.waits.census(0)).waiting === 0 && (await openPlaces(harness)).length === 0, 10_000);
  } finally {
    await harness.close();
    await receiver.close();
  }
}, 60_000);

it.concurrent('a head in flight on a slow endpoint when its endpoint turns order off is not ended early: the refund behind it is sent only after the head is answered', async () => {
  let answeredAt = 0;
  const receiver = await Receiver.start((n) => {
    if (n === 0) {
      setTimeout(() => (answeredAt = Date.now()), 2_500);
      return { status: 204, delayMs: 2_500 };
    }
    return 204;
  });
  const merchant = testMerchant('m_order_upkeep_slow', receiver.url);
  merchant.endpoints[0]!.orderByReference = true;
  // 6 s for the head's 2.5 s answer: at the file's 3 s, a loaded CI host timed the head out and sent it again.
  const harness = await startHarness({ name: 'order-upkeep-slow', merchants: [merchant], retryDelaysMs: [500], waitLeaseMs: 1_000, settings: { deliveryTimeoutMs: 2 * DELIVERY_TIMEOUT_MS } });
  try {
    await harness.publisher.publish(eventOf('charge.completed', merchant.id, 'TX-SLOW'), { messageId: 'evt_slow_1' });
    await receiver.waitForRequests(1, 10_000);
    await harness.publisher.publish(eventOf('refund.completed', merchant.id, 'TX-SLOW'), { messageId: 'evt_slow_2' });
    await waitFor('the refund waiting behind the charge', () => harness.dispatcher.stats.ordered === 1, 10_000);
    await harness.setMerchants([{ ...merchant, endpoints: [{ ...merchant.endpoints[0]!, orderByReference: false }] }]);
    await waitFor('the refund delivered', () => receiver.requests.length === 2, 20_000);
    expect(receiver.requests.map((r) => r.headers['webhook-id'])).toEqual(['evt_slow_1', 'evt_slow_2']);
    expect(answeredAt).toBeGreaterThan(0);
    expect(receiver.requests[1]!.at).toBeGreaterThanOrEqual(answeredAt);
  } finally {
    await harness.close();
    await receiver.close();
  }
}, 30_000);

it.concurrent('an old open place of an endpoint that still orders (its head back in a long dispatch queue) is left to its head: the upkeep ends only the places of endpoints that no longer order', async () => {
  const receiver = await Receiver.start(() => 204);
  const kept = testMerchant('m_order_upkeep_kept', receiver.url);
  kept.endpoints[0]!.orderByReference = true;
  const harness = await startHarness({ name: 'order-upkeep-kept', merchants: [kept], retryDelaysMs: [500], waitLeaseMs: 1_000, settings: { deliveryTimeoutMs: DELIVERY_TIMEOUT_MS } });
  try {
    // Two lines of an hour-old head (no wait: its message is in a queue, or lost) with a refund waiting behind it:
    // one of the ordered endpoint, one of a merchant that is gone. Each line in one statement, as
    // webhook_order_step writes a place with its wait: the upkeep (every 200 ms) that ran between a
    // line's places and its wait found the refund's place with no wait, released both, and the
    // 'ordered' wait written after them had no place before it to make it due: it waited for ever.
    const endpointId = kept.endpoints[0]!.id;
    for (const [m, p] of [[kept.id, endpointId], ['m_order_upkeep_gone', 'ep_order_upkeep_gone']] as const) {
      await harness.database.query(
        `WITH places AS (INSERT INTO webhook_order (merchant_id, endpoint_id, order_key, webhook_id, admitted_at)
           VALUES ($1, $2, 'TX-OLD', 'evt_old_1', now() - interval '1 hour'), ($1, $2, 'TX-OLD', 'evt_old_2', now() - interval '1 hour'))
         INSERT INTO webhook_waits (merchant_id, webhook_id, endpoint_id, attempt, due_at, pick_at, reason, headers) VALUES ($1, 'evt_old_2', $2, 0, now(), NULL, 'ordered', '{}'::jsonb)`,
        [m, p],
      );
    }
    // The gone merchant's line is released (its refund handed back with no bytes, parked, its wait ended with the park).
    await waitFor('the gone merchant’s line released', async () =>
      (await harness.database.query("SELECT 1 FROM webhook_order WHERE merchant_id = 'm_order_upkeep_gone' AND webhook_id = 'evt_old_1'")).length === 0, 20_000);
    // Rounds of the upkeep since: the ordered endpoint's old head keeps its place, its refund its wait with no pick time.
    await waitFor('the gone merchant’s refund settled', async () => (await harness.database.query("SELECT 1 FROM webhook_waits WHERE merchant_id = 'm_order_upkeep_gone'")).length === 0, 20_000);
    expect(await harness.database.query('SELECT webhook_id FROM webhook_order WHERE merchant_id = $1 AND ended_at IS NULL ORDER BY seq', [kept.id])).toEqual([{ webhook_id: 'evt_old_1' }, { webhook_id: 'evt_old_2' }]);
    expect(await harness.database.query('SELECT pick_at FROM webhook_waits WHERE merchant_id = $1', [kept.id])).toEqual([{ pick_at: null }]);
    expect(receiver.requests).toHaveLength(0);
  } finally {
    await harness.close();
    await receiver.close();
  }
}, 60_000);
