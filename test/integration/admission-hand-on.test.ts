import { sampleEvent } from '../../libs/contracts/index.js';
import type { Merchant } from '../../libs/merchants/index.js';
import { type Harness, startHarness, testMerchant } from '../support/harness.js';
import { Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

/**
 * A freed request slot wakes one delivery per line (the endpoint's, the merchant's, the process's).
 * One woken that leaves admission without it (postponed by the circuit its row opened meanwhile)
 * must hand it on, or the next in line sleeps beside a free slot: here until an unrelated request
 * ends, or, with no deferral left (no timer), for ever.
 */

/** Counts deliveries come to the guards, so a case knows its deliveries wait there in the order it published them. */
function countAdmissions(harness: Harness): { entered: number } {
  const guards = harness.dispatcher.guards;
  const acquire = guards.acquire.bind(guards);
  const count = { entered: 0 };
  guards.acquire = (...args) => {
    count.entered++;
    return acquire(...args);
  };
  return count;
}

describe("a delivery waiting for the process's room when another endpoint's circuit opens", () => {
  let dying: Receiver;
  let busy: Receiver;
  let shop: Receiver;
  let harness: Harness;
  const merchants = { dying: testMerchant('m_hand_dying', 'http://placeholder'), busy: testMerchant('m_hand_busy', 'http://placeholder'), shop: testMerchant('m_hand_shop', 'http://placeholder') };

  beforeAll(async () => {
    dying = await Receiver.start(() => 'hang');
    busy = await Receiver.start(() => 'hang');
    shop = await Receiver.start(() => 204);
    merchants.dying.endpoints[0]!.url = dying.url;
    merchants.busy.endpoints[0]!.url = busy.url;
    merchants.shop.endpoints[0]!.url = shop.url;
    // Two requests at once, one per endpoint; one failure opens a circuit; no deferral (no timer wakes a waiter).
    harness = await startHarness({
      name: 'hand-room',
      merchants: Object.values(merchants),
      retryDelaysMs: [60_000],
      settings: { concurrency: 2, perEndpointConcurrency: 1, deliveryTimeoutMs: 30_000, breakerThreshold: 1, breakerCooldownMs: 60_000, maxDeferrals: 0 },
    });
  });

  afterAll(async () => {
    busy?.answerHeld(204);
    await harness?.close();
    await Promise.all([dying?.close(), busy?.close(), shop?.close()]);
  });

  it('gets the slot the postponed delivery leaves, not the next request to end', async () => {
    const admissions = countAdmissions(harness);
    // The dying endpoint's first in flight, the busy one's in flight (the process full), then the
    // dying one's second in its line, then the shop's waiting for the process: the youngest.
    await harness.publisher.publish(sampleEvent('payout', merchants.dying.id));
    await dying.waitForRequests(1);
    await harness.publisher.publish(sampleEvent('payout', merchants.busy.id));
    await busy.waitForRequests(1);
    await harness.publisher.publish(sampleEvent('payout', merchants.dying.id));
    await waitFor("the dying endpoint's second in its line", () => admissions.entered >= 3, 10_000);
    await harness.publisher.publish(sampleEvent('payout', merchants.shop.id));
    await waitFor("the shop's waiting for the process's room", () => harness.dispatcher.guards.waitingForRoom === 1, 10_000);
    // Its row opens (another dispatcher's failures; announced as any opening): the one in its line is
    // postponed at once. A breaker opens with its row only: had this dispatcher's own 500 opened it,
    // the one in line would have taken the freed slot before the announcement.
    await harness.database.query(
      `WITH opened AS (INSERT INTO wait_circuits (merchant_id, endpoint_id, probe_at, cooldown_ms) VALUES ($1, $2, now() + interval '1 minute', 60000) RETURNING 1)
       SELECT pg_notify('wait_circuits', json_build_object('m', $1::text, 'e', $2::text, 'open', true, 'cooldown', 60000, 'probe', 60000)::text) FROM opened`,
      [merchants.dying.id, merchants.dying.endpoints[0]!.id],
    );
    await waitFor('the second postponed', () => harness.dispatcher.stats.circuitOpen >= 1, 10_000);
    dying.answerHeld(500);
    // Its first request fails: the slot it frees goes to the shop's. Left asleep, the shop's waited
    // for the busy endpoint's request to end: its 30 s timeout.
    await shop.waitForRequests(1, 5_000);
    // Its slot is given back once its answer is read, a moment after the shop has the request.
    await waitFor("the shop's delivered", () => harness.dispatcher.stats.delivered >= 1, 5_000);
    expect(busy.held).toBe(1);
    expect(harness.dispatcher.guards.inFlight).toBe(1);
  }, 30_000);
});

describe("a merchant's deliveries waiting for its share on its new URL when that URL's circuit opens", () => {
  let old: Receiver;
  let broken: Receiver;
  let harness: Harness;
  const merchant = testMerchant('m_hand_moved', 'http://placeholder');

  beforeAll(async () => {
    old = await Receiver.start(() => 'hang');
    broken = await Receiver.start(() => 500);
    merchant.endpoints[0]!.url = old.url;
    // Its share two requests; two failures open a circuit; no deferral, so no timer wakes a waiter.
    harness = await startHarness({
      name: 'hand-share',
      merchants: [merchant],
      retryDelaysMs: [60_000],
      settings: { concurrency: 4, deliveryTimeoutMs: 30_000, breakerThreshold: 2, breakerCooldownMs: 60_000, maxDeferrals: 0 },
    });
  });

  afterAll(async () => {
    await harness?.close();
    await Promise.all([old?.close(), broken?.close()]);
  });

  it('postpones every one of them, none held unacked', async () => {
    const admissions = countAdmissions(harness);
    await Promise.all(Array.from({ length: 2 }, () => harness.publisher.publish(sampleEvent('payout', merchant.id))));
    await old.waitForRequests(2);
    // The merchant moves its endpoint: the new URL has room, its share none (its two on the old URL).
    await harness.setMerchants([{ ...merchant, endpoints: [{ ...merchant.endpoints[0]!, url: broken.url }] }]);
    await Promise.all(Array.from({ length: 6 }, () => harness.publisher.publish(sampleEvent('payout', merchant.id))));
    await waitFor("the six waiting for the merchant's share", () => admissions.entered >= 8, 10_000);
    expect(broken.requests).toHaveLength(0);
    // The old URL answers: the share's slots go to the new URL, whose 500s open its circuit. Woken one
    // per request that ends, the last two of the line found no request left to wake them.
    old.answerHeld(204);
    await waitFor('the two on the old URL delivered', () => harness.dispatcher.stats.delivered >= 2, 10_000);
    await waitFor('all six attempted or postponed', () => harness.dispatcher.stats.retried + harness.dispatcher.stats.circuitOpen >= 6, 10_000);
    expect(harness.dispatcher.guards.inFlight).toBe(0);
  }, 30_000);
});

/**
 * Two describes below: a harness whose endpoint holds its first request until the test answers it
 * and answers the rest at once, one request at a time to it and no deferral, so a second webhook
 * waits in the endpoint's line.
 */
function heldFirst(name: string, merchant: Merchant): { endpoint: Receiver; harness: Harness } {
  const held = {} as { endpoint: Receiver; harness: Harness };
  beforeAll(async () => {
    held.endpoint = await Receiver.start((n) => (n === 0 ? 'hang' : 204));
    merchant.endpoints[0]!.url = held.endpoint.url;
    held.harness = await startHarness({ name, merchants: [merchant], retryDelaysMs: [60_000], settings: { concurrency: 2, perEndpointConcurrency: 1, deliveryTimeoutMs: 30_000, maxDeferrals: 0 } });
  });
  afterAll(async () => {
    await held.harness?.close();
    await held.endpoint?.close();
  });
  return held;
}

/** The first webhook held in flight, the second waiting in its endpoint's line; the guards' count of deliveries come to them. */
async function secondInLine({ endpoint, harness }: { endpoint: Receiver; harness: Harness }, merchant: Merchant): Promise<{ entered: number }> {
  const admissions = countAdmissions(harness);
  await harness.publisher.publish(sampleEvent('payout', merchant.id));
  await endpoint.waitForRequests(1);
  await harness.publisher.publish(sampleEvent('payout', merchant.id));
  await waitFor("the second in its endpoint's line", () => admissions.entered >= 2, 10_000);
  return admissions;
}

describe("a delivery waiting for its endpoint's slot when its channel closes", () => {
  const merchant = testMerchant('m_hand_gone', 'http://placeholder');
  const held = heldFirst('hand-gone', merchant);

  it('is not sent: the broker has returned it, and its redelivery is the one sent', async () => {
    const { endpoint, harness } = held;
    const admissions = await secondInLine(held, merchant);
    // The consumer channel dies: the broker returns both, and the dispatcher gets them again.
    const channels = (harness.broker as unknown as { consumerChannels: Map<{ close(): Promise<void> }, unknown> }).consumerChannels;
    await Promise.all([...channels.keys()].map((ch) => ch.close().catch(() => {})));
    await waitFor('both redelivered to the guards', () => admissions.entered >= 4, 15_000);
    // The first answered (it was in flight: sent again, at least once). The one that waited, woken
    // for the slot, went on to POST a delivery the broker had already given back: sent twice.
    const first = String(endpoint.requests[0]!.headers['webhook-id']);
    endpoint.answerHeld(204);
    const walks = (harness.dispatcher as unknown as { inFlight: Set<unknown> }).inFlight;
    await waitFor('every one delivered and settled', async () => harness.dispatcher.stats.delivered >= 3 && walks.size === 0 && (await harness.test.messageCount(harness.names.dispatch)) === 0, 15_000);
    const second = endpoint.requests.map((r) => String(r.headers['webhook-id'])).filter((id) => id !== first);
    expect(second).toHaveLength(1);
  }, 40_000);
});

describe("a delivery waiting for its endpoint's slot when the merchant turns the endpoint off", () => {
  const merchant = testMerchant('m_hand_off', 'http://placeholder');
  const held = heldFirst('hand-off', merchant);

  it('is not sent once it gets the slot: skipped, as an event that came after the change is', async () => {
    const { endpoint, harness } = held;
    await secondInLine(held, merchant);
    // The merchant turns the endpoint off (it might as well delete it) while the second waits.
    await harness.setMerchants([{ ...merchant, endpoints: [{ ...merchant.endpoints[0]!, enabled: false, disabledReason: 'manual' }] }]);
    const skipped = harness.dispatcher.stats.skipped;
    endpoint.answerHeld(204);
    // Woken for the slot, it went on to POST to the endpoint turned off seconds before.
    await waitFor('the waiting one skipped', () => harness.dispatcher.stats.skipped > skipped, 10_000);
    expect(endpoint.requests).toHaveLength(1);
    expect(harness.dispatcher.guards.inFlight).toBe(0);
  }, 30_000);
});

describe("a retry handed back that waits in its endpoint's line past its lease", () => {
  let endpoint: Receiver;
  let harness: Harness;
  const merchant = testMerchant('m_hand_lease', 'http://placeholder');

  beforeAll(async () => {
    // The first request (the retried webhook's first attempt) fails at once; every other is answered in a second.
    endpoint = await Receiver.start((n) => (n === 0 ? 500 : { status: 204, delayMs: 1_000 }));
    merchant.endpoints[0]!.url = endpoint.url;
    // One request at a time to the endpoint, its lease 3 s (twice the 1.5 s timeout), no deferral:
    // the retry waits behind three webhooks of a second each, then takes its own second: 4 s from its take.
    harness = await startHarness({
      name: 'hand-lease',
      merchants: [merchant],
      retryDelaysMs: [300],
      waitLeaseMs: 3_000,
      settings: { concurrency: 2, perEndpointConcurrency: 1, deliveryTimeoutMs: 1_500, maxDeferrals: 0 },
    });
  });

  afterAll(async () => {
    await harness?.close();
    await endpoint?.close();
  });

  it('is sent once: its lease renewed when it gets its slot, or, handed on meanwhile, given up for the copy', async () => {
    const { messageId: retried } = await harness.publisher.publish(sampleEvent('payout', merchant.id));
    await endpoint.waitForRequests(1);
    for (let i = 0; i < 3; i++) await harness.publisher.publish(sampleEvent('payout', merchant.id));
    const walks = (harness.dispatcher as unknown as { inFlight: Set<unknown> }).inFlight;
    const sends = () => endpoint.requests.filter((r) => r.headers['webhook-id'] === retried).length;
    await waitFor('the four delivered and everything settled', async () =>
      harness.dispatcher.stats.delivered >= 4 && walks.size === 0 && (await harness.test.messageCount(harness.names.dispatch)) === 0 &&
      (await harness.waits.census(60_000)).waiting === 0, 20_000);
    // Taken once, its lease ran out while it waited and was sent: the row handed it on, and the copy was sent too (3).
    expect(sends()).toBe(2);
  }, 40_000);
});
