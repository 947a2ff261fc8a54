import { createHash } from 'node:crypto';
import pg from 'pg';
import { copyHeaders, type EventName } from '../../libs/contracts/index.js';
import { BrokerConnection } from '../../libs/broker/index.js';
import { OrderStore } from '../../libs/ordering/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { EventPublisher } from '../../libs/publisher/index.js';
import { declareIntake } from '../../libs/topology/index.js';
import { TestBroker, brokerUrl, uniquePrefix } from '../support/broker.js';
import { startHarness, testMerchant, testSecret } from '../support/harness.js';
import { seedMerchants } from '../support/merchant-rows.js';
import { attemptReceiver, eventOf, headGivenAgain, sentOutOfOrder, timeline } from '../support/order.js';
import { createTestDatabase } from '../support/postgres.js';
import { dispatcherEnv, startProgram } from '../support/process.js';
import { Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

/**
 * Order per reference (issue 55): for a merchant with `orderByReference`, a webhook is not sent
 * while an earlier one of its tnxRef / payout reference is not yet delivered, failed or skipped,
 * and only that reference waits. Each test was seen failing on a broken variant (see the report
 * of the change that added them).
 *
 * Side by side: each case with a harness of its own (prefix, database, receiver, merchants), as
 * root-level cases named as their describe and case were (Jest runs only sibling concurrent cases
 * together). Not the fresh message's, which counts OrderStore's look-ups on its prototype (a
 * concurrent case's would count), nor the 1,000 references', which keeps two dispatcher processes busy.
 */

it.concurrent('a charge that fails twice, then its refund reaches the merchant before the refund, and the refund follows within a second', async () => {
  const charges = new Map<string, number>();
  const delivered = new Set<number>();
  const receiver = await Receiver.start((n, req) => {
    const id = String(req.headers['webhook-id']);
    if (JSON.parse(req.body).event === 'charge.completed') {
      const tries = (charges.get(id) ?? 0) + 1;
      charges.set(id, tries);
      if (tries <= 2) return 500;
    }
    delivered.add(n);
    return 204;
  });
  const merchant = testMerchant('m_ordered', receiver.url);
  merchant.endpoints[0]!.orderByReference = true;
  const harness = await startHarness({ name: 'order-charge-refund', merchants: [merchant], retryDelaysMs: [300, 300, 300] });
  try {
    const charge = await harness.publisher.publish(eventOf('charge.completed', merchant.id, 'TX-1'), { messageId: 'evt_charge' });
    const refund = await harness.publisher.publish(eventOf('refund.completed', merchant.id, 'TX-1'), { messageId: 'evt_refund' });
    await waitFor('the refund delivered', () => receiver.requests.some((r, n) => delivered.has(n) && r.headers['webhook-id'] === refund.messageId), 20_000);
    const ids = receiver.requests.map((r) => r.headers['webhook-id']);
    expect(ids).toEqual([charge.messageId, charge.messageId, charge.messageId, refund.messageId]);
    const [, , chargeDone, refundFirst] = receiver.requests;
    // The issue's 1 s: ~100 ms alone (the scheduler's poll), 1.8 s in a CI run on a machine half as fast with
    // every file beside it (2026-11-30). What else could release the refund (the order upkeep, after an
    // hour) would not come within this case's 20 s either way.
    expect(refundFirst!.at - chargeDone!.at).toBeLessThan(5_000);
    expect(harness.dispatcher.stats.ordered).toBe(1);
    await waitFor('no wait left', async () => (await harness.waits.census(0)).waiting === 0, 10_000);
  } finally {
    await harness.close();
    await receiver.close();
  }
});

describe('a fresh message of a merchant that does not order', () => {
  it('costs no look-up of a place in order, wherever it was published (straight to dispatch, as a bench does)', async () => {
    const receiver = await Receiver.start(() => 204);
    const merchant = testMerchant('m_unordered', receiver.url);
    const harness = await startHarness({ name: 'order-fresh-unordered', merchants: [merchant], retryDelaysMs: [300] });
    // A round trip per message cost the dispatcher half its rate (BENCHMARKS 1b, 0.54× before this).
    const holds = OrderStore.prototype.holds;
    let lookups = 0;
    OrderStore.prototype.holds = function (this: OrderStore, ...args: Parameters<OrderStore['holds']>) {
      lookups++;
      return holds.apply(this, args);
    };
    try {
      for (let i = 0; i < 20; i++) {
        harness.test.channel.sendToQueue(harness.names.dispatch, Buffer.from(JSON.stringify(eventOf('charge.completed', merchant.id, `TX-F${i}`))), { messageId: `evt_fresh_${i}`, persistent: true });
      }
      await waitFor('the 20 delivered', () => receiver.requests.length >= 20, 15_000);
      expect(lookups).toBe(0);
    } finally {
      OrderStore.prototype.holds = holds;
      await harness.close();
      await receiver.close();
    }
  });
});

it.concurrent('a head parked as invalid by an unexpected error ends its place: the next webhook of its reference is sent; requeued once fixed, it is sent too, outside the order', async () => {
  const receiver = await Receiver.start(() => 204);
  const merchant = testMerchant('m_parked_head', receiver.url);
  merchant.endpoints[0]!.orderByReference = true;
  const harness = await startHarness({ name: 'order-parked-head', merchants: [merchant], retryDelaysMs: [300, 300] });
  // The directory fails once, after the head's admission: its third look-up (routing, its place
  // in order, then the admission's). The second parked it before it took a place.
  const byId = harness.merchants.byId.bind(harness.merchants);
  let lookups = 0;
  harness.merchants.byId = (id: string) => {
    if (id === merchant.id && ++lookups === 3) throw new Error('directory broke');
    return byId(id);
  };
  try {
    await harness.publisher.publish(eventOf('charge.completed', merchant.id, 'TX-P'), { messageId: 'evt_parked' });
    await waitFor('the head parked as invalid', async () => (await harness.test.messageCount(harness.names.invalid)) === 1, 10_000);
    // Its place ends after the move to `invalid` is confirmed (and before the ack): seen there first under load.
    await waitFor('its place ended', async () => (await harness.database.query('SELECT webhook_id FROM webhook_order WHERE ended_at IS NOT NULL')).length > 0, 10_000);
    expect(await harness.database.query('SELECT webhook_id FROM webhook_order WHERE ended_at IS NOT NULL')).toEqual([{ webhook_id: 'evt_parked' }]);
    const next = await harness.publisher.publish(eventOf('refund.completed', merchant.id, 'TX-P'), { messageId: 'evt_after_parked' });
    await waitFor('the next of its reference delivered', () => receiver.requests.some((r) => r.headers['webhook-id'] === next.messageId), 10_000);
    expect(receiver.requests.map((r) => r.headers['webhook-id'])).toEqual([next.messageId]);
    // The operator's `webhooks invalid requeue --code internal-error`, by hand: found 'ended', it was dropped unsent.
    for (const m of await harness.test.drain(harness.names.invalid, 1)) {
      await harness.test.publishRaw(harness.names.dispatch, m.content, { messageId: m.properties.messageId, contentType: 'application/json', headers: copyHeaders(m.properties.headers, { from: 'parked', unpark: true, upstreamExchange: harness.names.events, dispatch: harness.names.dispatch }) });
    }
    await waitFor('the requeued head delivered', () => receiver.requests.length === 2, 10_000);
    expect(receiver.requests.map((r) => r.headers['webhook-id'])).toEqual([next.messageId, 'evt_parked']);
  } finally {
    await harness.close();
    await receiver.close();
  }
});

it.concurrent('a delivered webhook republished with its messageId after the hour its ended row is kept is a new webhook in its line: delivered again, though no other end swept the old row', async () => {
  const receiver = await Receiver.start(() => 204);
  const merchant = testMerchant('m_order_republished', receiver.url);
  merchant.endpoints[0]!.orderByReference = true;
  const harness = await startHarness({ name: 'order-republished', merchants: [merchant], retryDelaysMs: [300] });
  try {
    await harness.publisher.publish(eventOf('charge.completed', merchant.id, 'TX-REPUB'), { messageId: 'evt_republished' });
    await waitFor('the first delivered and its place ended', async () =>
      receiver.requests.length === 1 && (await harness.database.query('SELECT 1 FROM webhook_order WHERE ended_at IS NOT NULL')).length === 1, 10_000);
    // A quiet spell: its row ended two hours ago, and no end since swept it (past the intake dedupe window too).
    await harness.database.query("UPDATE webhook_order SET ended_at = now() - interval '2 hours'");
    await harness.publisher.publish(eventOf('charge.completed', merchant.id, 'TX-REPUB'), { messageId: 'evt_republished' });
    await waitFor('the republished copy delivered', () => receiver.requests.length === 2, 10_000);
    await waitFor('its new place ended', async () =>
      (await harness.database.query("SELECT 1 FROM webhook_order WHERE ended_at > now() - interval '1 hour'")).length === 1, 10_000);
    expect(harness.dispatcher.stats.superseded).toBe(0);
  } finally {
    await harness.close();
    await receiver.close();
  }
});

it.concurrent('a payout whose reference is the tnxRef of a charge that keeps failing is not held behind the charge: a payout reference and a tnxRef are keys apart', async () => {
  const receiver = await Receiver.start((_n, req) => (JSON.parse(req.body).event === 'charge.completed' ? 503 : 204));
  const merchant = testMerchant('m_order_payout_apart', receiver.url);
  merchant.endpoints[0]!.orderByReference = true;
  const harness = await startHarness({ name: 'order-payout-apart', merchants: [merchant], retryDelaysMs: [500, 60_000], settings: { breakerThreshold: 1_000 } });
  try {
    await harness.publisher.publish(eventOf('charge.completed', merchant.id, 'SHARED-1'), { messageId: 'evt_apart_charge' });
    await receiver.waitForRequests(1, 10_000);
    await harness.publisher.publish(eventOf('payout', merchant.id, 'SHARED-1'), { messageId: 'evt_apart_payout' });
    await waitFor('the payout delivered', () => receiver.requests.some((r) => r.headers['webhook-id'] === 'evt_apart_payout'), 10_000);
    expect(harness.dispatcher.stats.ordered).toBe(0);
  } finally {
    await harness.close();
    await receiver.close();
  }
});

it.concurrent('an ordered retry whose hand-back keeps hitting an unexpected error is parked in invalid once, its wait ends and its line is released: the next of its reference is delivered', async () => {
  const receiver = await Receiver.start((n) => (n === 0 ? 500 : 204));
  const merchant = testMerchant('m_order_broken_retry', receiver.url);
  merchant.endpoints[0]!.orderByReference = true;
  // A lease of a second: the wait is handed back again each second while it is left.
  const harness = await startHarness({ name: 'order-broken-retry', merchants: [merchant], retryDelaysMs: [200, 200, 200], waitLeaseMs: 1_000, settings: { deliveryTimeoutMs: 500 } });
  // A bug-class error in the dispatcher on every hand-back of the first webhook, never on a first attempt.
  const attempt = (harness.dispatcher as unknown as { attempt: { run(intake: { webhookId: string; hand?: number }, ...rest: unknown[]): Promise<unknown> } }).attempt;
  const run = attempt.run.bind(attempt);
  attempt.run = (intake, ...rest) => (intake.webhookId === 'evt_broken_1' && intake.hand !== undefined ? Promise.reject(new Error('attempt stage broke')) : run(intake, ...rest));
  try {
    await harness.publisher.publish(eventOf('charge.completed', merchant.id, 'TX-BROKEN'), { messageId: 'evt_broken_1' });
    await receiver.waitForRequests(1, 10_000);
    await harness.publisher.publish(eventOf('refund.completed', merchant.id, 'TX-BROKEN'), { messageId: 'evt_broken_2' });
    await waitFor('the next of its reference delivered', () => receiver.requests.some((r) => r.headers['webhook-id'] === 'evt_broken_2'), 10_000);
    await waitFor('no wait left', async () => (await harness.waits.census(0)).waiting === 0, 10_000);
    // Two leases more: nothing hands it back, so no second copy is parked.
    await waitFor('two leases passed', async () =>
      (await harness.database.query("SELECT 1 FROM webhook_order WHERE webhook_id = 'evt_broken_2' AND ended_at < now() - interval '2 seconds'")).length === 1, 10_000);
    expect(await harness.test.messageCount(harness.names.invalid)).toBe(1);
    const [parked] = await harness.test.drain(harness.names.invalid, 1);
    expect(parked!.properties.headers?.['x-invalid-code']).toBe('internal-error');
    expect(parked!.properties.messageId).toBe('evt_broken_1');
  } finally {
    await harness.close();
    await receiver.close();
  }
}, 30_000);

it.concurrent("a dispatcher that dies between the end of a retried head's place and the end of its wait drops the hand-back the broker gives again: known as done, it is not sent after the next of its reference", async () => {
  const tries = new Map<string, number>();
  const receiver = await Receiver.start((_n, req) => {
    const id = String(req.headers['webhook-id']);
    tries.set(id, (tries.get(id) ?? 0) + 1);
    return id === 'evt_died_1' && tries.get(id) === 1 ? 500 : 204;
  });
  const merchant = testMerchant('m_died_between', receiver.url);
  merchant.endpoints[0]!.orderByReference = true;
  const harness = await startHarness({ name: 'order-died-between', merchants: [merchant], retryDelaysMs: [300, 300], settings: { drainTimeoutMs: 500 } });
  // The first webhook's retry is delivered and its place ended (the next is due); its wait's end
  // never comes, as if its dispatcher were killed there: its hand-back stays unacked. (Only that
  // end: the take of the copy given again ends the wait, as the dispatcher that takes it would.)
  const writer = (harness.dispatcher as unknown as { effect: { deps: { waits: { end(e: { webhookId: string }): Promise<void> } } } }).effect.deps.waits;
  const end = writer.end.bind(writer);
  let dying = true;
  writer.end = (e) => (e.webhookId === 'evt_died_1' && dying ? ((dying = false), new Promise<void>(() => {})) : end(e));
  try {
    await harness.publisher.publish(eventOf('charge.completed', merchant.id, 'TX-DIED'), { messageId: 'evt_died_1' });
    await harness.publisher.publish(eventOf('refund.completed', merchant.id, 'TX-DIED'), { messageId: 'evt_died_2' });
    await waitFor('the next delivered', () => receiver.requests.some((r) => r.headers['webhook-id'] === 'evt_died_2'), 10_000);
    // The dead dispatcher's channel closes: the broker gives its unacked hand-back again.
    const superseded = harness.dispatcher.stats.superseded;
    const channels = (harness.broker as unknown as { consumerChannels: Map<{ close(): Promise<void> }, unknown> }).consumerChannels;
    await Promise.all([...channels.keys()].map((ch) => ch.close().catch(() => {})));
    await waitFor('the hand-back given again settled', () => receiver.requests.length > 3 || harness.dispatcher.stats.superseded > superseded, 10_000);
    expect(receiver.requests.map((r) => r.headers['webhook-id'])).toEqual(['evt_died_1', 'evt_died_1', 'evt_died_2']);
    await waitFor('its wait gone', async () => (await harness.waits.census(0)).waiting === 0, 10_000);
  } finally {
    await harness.close();
    await receiver.close();
  }
}, 30_000);

/** headGivenAgain (test/support/order.ts) of TX-AGAIN: a charge and a refund. */
const givenAgain = (name: string, change: Parameters<typeof headGivenAgain>[1]) =>
  headGivenAgain(name, change, { reference: 'TX-AGAIN', ids: ['evt_again_1', 'evt_again_2'], options: { retryDelaysMs: [500, 500], settings: { deliveryTimeoutMs: 3_000, drainTimeoutMs: 500 } } });

it.concurrent('a head given again by the broker after the merchant turned orderByReference off still ends its place: the webhook waiting behind it goes after it, not never', async () => {
  const { receiver, harness } = await givenAgain('order-off-again', (endpoint) => [{ ...endpoint, orderByReference: false }]);
  try {
    // Sent as unordered, the charge left its place open: the refund waited for ever (no due time).
    await waitFor('the refund delivered', () => receiver.requests.some((r) => r.headers['webhook-id'] === 'evt_again_2'), 10_000);
    expect(receiver.requests.map((r) => r.headers['webhook-id'])).toEqual(['evt_again_1', 'evt_again_1', 'evt_again_2']);
    await waitFor('no wait left', async () => (await harness.waits.census(0)).waiting === 0, 10_000);
  } finally {
    await harness.close();
    await receiver.close();
  }
}, 30_000);

it.concurrent('a head given again by the broker after the merchant deleted its endpoint ends its place: the webhook waiting behind it goes to failed, not waits for ever', async () => {
  const { receiver, harness } = await givenAgain('order-deleted-again', () => []);
  try {
    // Routed nowhere, the charge was skipped with its place open: the refund waited for ever.
    await waitFor('the refund failed', async () => (await harness.database.query('SELECT 1 FROM failed_webhooks WHERE webhook_id = $1', ['evt_again_2'])).length === 1, 10_000);
    expect(receiver.requests).toHaveLength(1);
    await waitFor('no wait left', async () => (await harness.waits.census(0)).waiting === 0, 10_000);
  } finally {
    await harness.close();
    await receiver.close();
  }
}, 30_000);

it.concurrent('an ordered webhook held while its order step waits for PostgreSQL is signed with the time it is sent, so a merchant refusing a timestamp over 5 minutes old takes it', async () => {
  const receiver = await Receiver.start(() => 204);
  const merchant = testMerchant('m_order_held', receiver.url);
  merchant.endpoints[0]!.orderByReference = true;
  // The dispatcher's clock: the test moves it on while the step is held, as an outage's minutes pass.
  let passedMs = 0;
  const harness = await startHarness({ name: 'order-held-signature', merchants: [merchant], retryDelaysMs: [60_000], now: () => new Date(Date.now() + passedMs) });
  // Another session holds the order table, as a PostgreSQL that does not answer would: the step waits.
  const holder = new pg.Client({ connectionString: harness.database.url });
  await holder.connect();
  try {
    await holder.query('BEGIN');
    await holder.query('LOCK TABLE webhook_order IN EXCLUSIVE MODE');
    await harness.publisher.publish(eventOf('charge.completed', merchant.id, 'TX-HELD'), { messageId: 'evt_held' });
    await waitFor('the order step waiting', async () =>
      (await harness.database.query("SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()")).length > 0, 10_000);
    passedMs = 10 * 60_000;
    await holder.query('COMMIT');
    const [request] = await receiver.waitForRequests(1, 10_000);
    const sentAt = (Date.now() + passedMs) / 1000;
    expect(Math.abs(Number(request!.headers['webhook-timestamp']) - sentAt)).toBeLessThan(60);
  } finally {
    await holder.end();
    await harness.close();
    await receiver.close();
  }
});

it.concurrent('a reference whose first webhook keeps failing holds back its own next webhook only: every other reference of the merchant is delivered meanwhile', async () => {
  const delivered = new Set<number>();
  const receiver = await Receiver.start((n, req) => {
    if (JSON.parse(req.body).data.tnxRef === 'TX-STUCK') return 503;
    delivered.add(n);
    return 204;
  });
  const merchant = testMerchant('m_stuck', receiver.url);
  merchant.endpoints[0]!.orderByReference = true;
  // Retries for a minute and more: the stuck reference stays stuck for the whole test.
  const harness = await startHarness({ name: 'order-stuck', merchants: [merchant], retryDelaysMs: [500, 1_000, 2_000, 60_000], settings: { breakerThreshold: 1_000 } });
  try {
    await harness.publisher.publish(eventOf('charge.completed', merchant.id, 'TX-STUCK'), { messageId: 'evt_stuck_1' });
    await harness.publisher.publish(eventOf('refund.completed', merchant.id, 'TX-STUCK'), { messageId: 'evt_stuck_2' });
    await receiver.waitForRequests(1, 10_000);
    const others = new Set<string>();
    for (let i = 0; i < 50; i++) {
      for (const [k, event] of (['charge.completed', 'refund.completed'] as const).entries()) {
        others.add((await harness.publisher.publish(eventOf(event, merchant.id, `TX-${i}`), { messageId: `evt_${i}_${k}` })).messageId);
      }
    }
    const started = Date.now();
    await waitFor('every other reference delivered', () => [...others].every((id) => receiver.requests.some((r, n) => delivered.has(n) && r.headers['webhook-id'] === id)), 20_000);
    expect(Date.now() - started).toBeLessThan(10_000);
    // The others may all be through before the stuck one's first retry (500 ms): wait for it.
    await waitFor('the stuck one retried', () => receiver.requests.filter((r) => r.headers['webhook-id'] === 'evt_stuck_1').length >= 2, 10_000);
    expect(receiver.requests.some((r) => r.headers['webhook-id'] === 'evt_stuck_2')).toBe(false);
    // Each other reference in its own order too.
    const line = timeline(receiver.requests, delivered);
    for (let i = 0; i < 50; i++) expect(line.get(`evt_${i}_1`)!.first).toBeGreaterThan(line.get(`evt_${i}_0`)!.done!);
  } finally {
    await harness.close();
    await receiver.close();
  }
});

it.concurrent('an ordered merchant with two endpoints, a reference stuck on one of them holds that reference on the stuck endpoint alone: the other endpoint receives its webhooks in order meanwhile', async () => {
  const receiver = await Receiver.start((_n, req) => (req.path.endsWith('/a') ? 503 : 204));
  const merchant = testMerchant('m_order_two', receiver.url, {
    endpoints: [
      { id: 'ep_order_two_a', url: `${receiver.url}/a`, enabled: true, secret: testSecret(), orderByReference: true },
      { id: 'ep_order_two_b', url: `${receiver.url}/b`, enabled: true, secret: testSecret(), orderByReference: true },
    ],
  });
  // Endpoint a retries for a minute and more: the reference stays stuck there for the whole test.
  const harness = await startHarness({ name: 'order-two-endpoints', merchants: [merchant], retryDelaysMs: [500, 60_000], settings: { breakerThreshold: 1_000 } });
  const at = (endpoint: 'a' | 'b') => receiver.requests.filter((r) => r.path.endsWith(`/${endpoint}`));
  try {
    await harness.publisher.publish(eventOf('charge.completed', merchant.id, 'TX-TWO'), { messageId: 'evt_two_1' });
    await harness.publisher.publish(eventOf('refund.completed', merchant.id, 'TX-TWO'), { messageId: 'evt_two_2' });
    await waitFor('both delivered to b', () => at('b').length === 2, 10_000);
    expect(at('b').map((r) => r.headers['webhook-id'])).toEqual(['evt_two_1', 'evt_two_2']);
    await waitFor('the stuck one retried on a', () => at('a').length >= 2, 10_000);
    // a holds its refund behind its charge: its line is its own.
    expect(at('a').every((r) => r.headers['webhook-id'] === 'evt_two_1')).toBe(true);
  } finally {
    await harness.close();
    await receiver.close();
  }
});

describe('1,000 references × 5 events with random failures on two dispatchers, one killed', () => {
  const REFERENCES = 1_000;
  const EVENTS: EventName[] = ['charge.completed', 'refund.completed', 'refund.completed', 'refund.completed', 'refund.completed'];

  it('delivers every webhook, each reference in the order of intake', async () => {
    const prefix = uniquePrefix('order-kill');
    const test = await TestBroker.open();
    const database = await createTestDatabase('order_kill');
    const broker = new BrokerConnection({ url: brokerUrl(), name: 'test-order-kill', logger: silentLogger() });
    await broker.open(10_000);
    // A webhook's first and second attempts fail at random (a fifth of them), never its third. One
    // that meets the endpoint's circuit open (five failures in a row) after its schedule's span
    // fails for good without an attempt: it ends too, and is in failed.
    const { receiver, delivered } = await attemptReceiver((id, attempt) =>
      attempt <= 2 && createHash('sha256').update(`${id}#${attempt}`).digest()[0]! < 51 ? 500 : undefined);
    const merchant = testMerchant('m_order_kill', receiver.url);
    merchant.endpoints[0]!.orderByReference = true;
    await seedMerchants(database.url, [merchant]);
    const env = dispatcherEnv(prefix, database.url, { RETRY_SCHEDULE: '200ms,200ms,200ms', WAIT_LEASE: '5s', DISPATCH_CONCURRENCY: '32' });
    const first = startProgram('dist/apps/dispatcher/main.js', env);
    const second = startProgram('dist/apps/dispatcher/main.js', env);
    // What a wait that timed out saw: how far delivery got, where the rest were, what the dispatchers said.
    const progress = async () => {
      const waits = await database.query('SELECT reason, parked, count(*)::int AS n FROM webhook_waits GROUP BY 1, 2');
      const circuits = await database.query('SELECT endpoint_id, probe_at, now() FROM wait_circuits');
      const [counts] = await database.query<Record<string, number>>(
        'SELECT (SELECT count(*)::int FROM failed_webhooks) AS failed, (SELECT count(*)::int FROM webhook_order WHERE ended_at IS NULL) AS open, (SELECT count(*)::int FROM webhook_order) AS admitted');
      const sessions = await database.query(
        "SELECT application_name, state, wait_event_type, wait_event, round(extract(epoch FROM now() - query_start)::numeric, 1) AS for_s, left(query, 80) AS query FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND state <> 'idle'");
      const tail = (text: string) => text.split('\n').filter((line) => /"level":"(warn|error)"/.test(line)).slice(-5).join('\n');
      return `${delivered.size} delivered, ${receiver.requests.length} requests, ${JSON.stringify(counts)}, ` +
        `${await test.messageCount(`${prefix}.dispatch`).catch(() => -1)} in dispatch; waits: ${JSON.stringify(waits)}; circuits: ${JSON.stringify(circuits)}; busy sessions: ${JSON.stringify(sessions)}\n` +
        `first: ${tail(first.output.stdout + first.output.stderr)}\nsecond: ${tail(second.output.stdout + second.output.stderr)}`;
    };
    try {
      const channel = await broker.createChannel();
      await declareIntake(channel, prefix);
      await channel.close();
      const publisher = new EventPublisher(broker, prefix);
      const batch: Array<Promise<unknown>> = [];
      for (let r = 0; r < REFERENCES; r++) {
        for (const [k, event] of EVENTS.entries()) batch.push(publisher.publish(eventOf(event, merchant.id, `REF-${r}`), { messageId: `evt_${r}_${k}` }));
        if (batch.length >= 250) await Promise.all(batch.splice(0));
      }
      await Promise.all(batch);
      // Two dispatcher processes start first: under CI's load their start and the first fifth took over a minute once.
      await waitFor('a fifth delivered', () => delivered.size >= REFERENCES, 120_000).catch(async (err: unknown) => {
        throw new Error(`${(err as Error).message}: ${await progress()}`);
      });
      first.child.kill('SIGKILL');
      expect((await first.finished).code).toBeNull();
      const all = REFERENCES * EVENTS.length;
      const failedForGood = async () => new Set((await database.query<{ webhook_id: string }>('SELECT webhook_id FROM failed_webhooks')).map((row) => row.webhook_id));
      const ended = async () => {
        const failed = await failedForGood();
        const line = timeline(receiver.requests, delivered);
        return [...Array(REFERENCES).keys()].every((r) => EVENTS.every((_e, k) => line.get(`evt_${r}_${k}`)?.done !== undefined || failed.has(`evt_${r}_${k}`)));
      };
      await waitFor('every webhook delivered or failed for good', ended, 180_000).catch(async (err: unknown) => {
        const open = await database.query('SELECT o.order_key, o.webhook_id, o.seq, w.reason, w.hand, w.pick_at, w.due_at FROM webhook_order o LEFT JOIN webhook_waits w USING (merchant_id, webhook_id) WHERE o.ended_at IS NULL ORDER BY o.order_key, o.seq LIMIT 20');
        const done = [...timeline(receiver.requests, delivered).values()].filter((t) => t.done !== undefined).length;
        throw new Error(`${(err as Error).message}: ${done} of ${all} delivered; unfinished: ${JSON.stringify(open)}; ${await progress()}`);
      });
      // The order of intake is PostgreSQL's (two dispatchers may take one reference's events in
      // either order, a killed one's come back later): each ended row stays an hour, with its place.
      const endedRows = () => database.query<{ order_key: string; webhook_id: string }>(
        'SELECT order_key, webhook_id FROM webhook_order WHERE merchant_id = $1 AND ended_at IS NOT NULL ORDER BY order_key, seq', [merchant.id]);
      // A place ends after its webhook's answer is back at the dispatcher (a failure's, after it is in
      // failed_webhooks): the receiver, and that table, see the last webhooks done before their ends
      // commit. Read at once, 4,999 of 5,000 were found ended in a loaded CI run (4,998 in 1 of 12
      // loaded runs here, the last two ended 10 ms after the read): waited for.
      const rows = await waitFor('every webhook\'s place ended', async () => {
        const ended = await endedRows();
        return ended.length === all && ended;
      }, 30_000).catch(async (err: unknown) => {
        // Which webhook has no ended place, and what its rows and requests say.
        const ended = new Set((await endedRows()).map((row) => row.webhook_id));
        const missing = [...Array(REFERENCES).keys()].flatMap((r) => EVENTS.map((_e, k) => `evt_${r}_${k}`)).filter((id) => !ended.has(id));
        const places = await database.query('SELECT o.*, w.reason, w.hand FROM webhook_order o LEFT JOIN webhook_waits w USING (merchant_id, webhook_id) WHERE o.webhook_id = ANY($1)', [missing]);
        const line = timeline(receiver.requests, delivered);
        throw new Error(`${(err as Error).message}: ${all - missing.length} of ${all} ended; no ended place: ${JSON.stringify(missing.slice(0, 20))}; ` +
          `their rows: ${JSON.stringify(places.slice(0, 20))}; their requests: ${JSON.stringify(missing.slice(0, 20).map((id) => line.get(id)))}; ${await progress()}`);
      });
      const line = timeline(receiver.requests, delivered);
      const failed = await failedForGood();
      // Five failures in a row among ~6,000 requests open the endpoint's circuit in some runs (232
      // failed for good in one); then each webhook whose short span (600 ms) ends while it is open
      // (its circuit row shared by both dispatchers) fails for good.
      expect(failed.size).toBeLessThan(all / 10);
      // Not sent while the one before it was not yet delivered (or, failed for good, attempted).
      expect(sentOutOfOrder(rows, line)).toEqual([]);
      const swapped = rows.filter((row, i) => rows[i - 1]?.order_key === row.order_key && rows[i - 1]!.webhook_id > row.webhook_id).length;
      // Mostly the order of publishing, which one queue keeps for one consumer.
      expect(swapped).toBeLessThan(all / 10);
    } finally {
      first.child.kill('SIGKILL');
      second.child.kill('SIGTERM');
      await second.finished;
      await receiver.close();
      await broker.close();
      await test.deleteTopology(prefix);
      await test.close();
      await database.drop();
    }
  }, 360_000);
});
