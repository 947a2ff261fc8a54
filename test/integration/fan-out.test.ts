import { Webhook } from 'standardwebhooks';
import type { DispatcherProgram } from '../../apps/dispatcher/program.js';
import { type EventName, sampleEvent } from '../../libs/contracts/index.js';
import type { Database } from '../../libs/delivery-store/index.js';
import type { Endpoint, EndpointSettings, Merchant, PgMerchantDirectory } from '../../libs/merchants/index.js';
import type { EventPublisher } from '../../libs/publisher/index.js';
import { uniquePrefix } from '../support/broker.js';
import { type DirectoryDispatchers, startDirectoryDispatchers } from '../support/directory-dispatchers.js';
import { testSecret } from '../support/harness.js';
import { collect, type Seen } from '../support/operational.js';
import type { TestDatabase } from '../support/postgres.js';
import type { ReceivedRequest, Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

/**
 * Issue 56: an event goes to each of a merchant's enabled endpoints whose filter takes it, one
 * delivery per endpoint with its own secret, attempts, circuit, in-flight share and failing clock,
 * on two dispatchers reading merchants from PostgreSQL. Each endpoint is a path of one receiver:
 * `/<merchant>/<endpoint name>`, answering what `answers` says for it (204 by default).
 */
describe('fan-out: one delivery per matching endpoint', () => {
  const prefix = uniquePrefix('fanout');
  const DISABLE_AFTER_MS = 5_000;
  let setup: DirectoryDispatchers;
  let db: TestDatabase;
  let database: Database;
  let directory: PgMerchantDirectory;
  let endpoints: EndpointSettings;
  let receiver: Receiver;
  let operational: Seen[];
  let dispatchers: DispatcherProgram[] = [];
  let publisher: EventPublisher;
  /** Path (merchant/name) → what it answers to the n-th request it gets. */
  const answers = new Map<string, (n: number, req: ReceivedRequest) => number | 'hang'>();
  const counts = new Map<string, number>();

  beforeAll(async () => {
    const answer = (_n: number, req: ReceivedRequest) => {
      const path = req.path.slice('/webhooks/'.length);
      const n = counts.get(path) ?? 0;
      counts.set(path, n + 1);
      return answers.get(path)?.(n, req) ?? 204;
    };
    const env = {
      RETRY_SCHEDULE: '100ms,100ms,100ms,100ms',
      ENDPOINT_DISABLE_AFTER: `${DISABLE_AFTER_MS}ms`,
      DELIVERY_TIMEOUT_MS: '3000',
      DISPATCH_CONCURRENCY: '16',
    };
    setup = await startDirectoryDispatchers({ prefix, name: 'fan_out', answer, env, count: 2 });
    ({ db, database, directory, endpoints, receiver, dispatchers, publisher } = setup);
    operational = await collect(setup.test, prefix);
  });

  afterAll(async () => {
    await setup?.test.channel.deleteQueue(`${prefix}.test-subscriber`).catch(() => {});
    await setup?.close();
  });

  /** An endpoint of `merchantId` named `name` (its path), with its own secret. */
  function endpoint(merchantId: string, name: string, settings: Partial<Endpoint> = {}): Endpoint {
    return { id: `ep_${merchantId}_${name}`, url: `${receiver.url}/${merchantId}/${name}`, enabled: true, secret: testSecret(), ...settings };
  }

  /** Writes the merchant with these endpoints and waits for both dispatchers to hold it. */
  async function merchant(id: string, list: Endpoint[]): Promise<Merchant> {
    const written: Merchant = { id, publicKey: `pk_fanout_${id}_0001`, endpoints: list };
    await directory.update(id, () => written);
    await waitFor(`both dispatchers know ${id}`, () => dispatchers.every((d) => d.merchants.byId(id)?.endpoints.length === list.length), 5_000);
    return written;
  }

  const at = (merchantId: string, name: string) => receiver.requests.filter((r) => r.path === `/webhooks/${merchantId}/${name}`);
  const ids = (requests: ReceivedRequest[]) => requests.map((r) => String(r.headers['webhook-id']));
  const verifies = (secret: string, r: ReceivedRequest) => {
    try {
      new Webhook(secret).verify(r.body, r.headers as Record<string, string>);
      return true;
    } catch {
      return false;
    }
  };
  const publish = async (merchantId: string, event: EventName) => (await publisher.publish(sampleEvent(event, merchantId))).messageId;

  it('sends each of three endpoints exactly the events its filter takes, each signed with its own secret, under one webhook-id', async () => {
    const [payouts, charges, all] = [
      endpoint('m_three', 'payouts', { events: ['payout'] }),
      endpoint('m_three', 'charges', { events: ['charge.completed', 'refund.completed'] }),
      endpoint('m_three', 'all'),
    ];
    await merchant('m_three', [payouts!, charges!, all!]);
    const payout = await publish('m_three', 'payout');
    const charge = await publish('m_three', 'charge.completed');
    const refund = await publish('m_three', 'refund.completed');
    await waitFor('every delivery', () => at('m_three', 'payouts').length >= 1 && at('m_three', 'charges').length >= 2 && at('m_three', 'all').length >= 3, 10_000);
    // A last event for the two that take it: once both have it, anything sent before it is in.
    const last = await publish('m_three', 'charge.completed');
    await waitFor('the last one', () => ids(at('m_three', 'charges')).includes(last) && ids(at('m_three', 'all')).includes(last), 10_000);
    expect(ids(at('m_three', 'payouts'))).toEqual([payout]);
    expect(ids(at('m_three', 'charges')).sort()).toEqual([charge, refund, last].sort());
    expect(ids(at('m_three', 'all')).sort()).toEqual([payout, charge, refund, last].sort());
    for (const [ep, name] of [[payouts!, 'payouts'], [charges!, 'charges'], [all!, 'all']] as const) {
      for (const request of at('m_three', name)) {
        expect(verifies(ep.secret, request)).toBe(true);
        // Signed with its own secret only: another endpoint's does not verify it.
        for (const other of [payouts!, charges!, all!].filter((e) => e !== ep)) expect(verifies(other.secret, request)).toBe(false);
      }
    }
    // One message, many endpoints: the same webhook-id and the same bytes on each.
    const payoutBodies = [...at('m_three', 'payouts'), ...at('m_three', 'all')].filter((r) => r.headers['webhook-id'] === payout).map((r) => r.body);
    expect(payoutBodies).toHaveLength(2);
    expect(payoutBodies[0]).toBe(payoutBodies[1]);
  });

  it("sends a test event for one endpoint (the portal's) to that endpoint alone, once", async () => {
    const [first, second] = [endpoint('m_test', 'first'), endpoint('m_test', 'second')];
    await merchant('m_test', [first!, second!]);
    const { messageId } = await publisher.publish(sampleEvent('payout', 'm_test'), { test: true, endpointId: second!.id });
    await waitFor('the test event at its endpoint', () => ids(at('m_test', 'second')).includes(messageId), 10_000);
    // An event for both after it: once the first endpoint has that one, the test event would be in before it.
    const after = await publish('m_test', 'payout');
    await waitFor('the next event at both', () => ids(at('m_test', 'first')).includes(after) && ids(at('m_test', 'second')).includes(after), 10_000);
    expect(ids(at('m_test', 'first'))).toEqual([after]);
    expect(ids(at('m_test', 'second')).filter((id) => id === messageId)).toHaveLength(1);
  });

  it("rotating one endpoint's secret leaves the other endpoints' signatures as they were", async () => {
    const [one, two, three] = [endpoint('m_rot', 'one'), endpoint('m_rot', 'two'), endpoint('m_rot', 'three')];
    await merchant('m_rot', [one!, two!, three!]);
    const rotated = await endpoints.rotate('m_rot', two!.id, 0);
    const { secret } = rotated;
    await waitFor('both dispatchers sign with the new secret', () => dispatchers.every((d) => d.merchants.byId('m_rot')?.endpoints.find((e) => e.id === two!.id)?.secret === secret), 5_000);
    const id = await publish('m_rot', 'payout');
    await waitFor('all three', () => ['one', 'two', 'three'].every((name) => ids(at('m_rot', name)).includes(id)), 10_000);
    const [a, b, c] = ['one', 'two', 'three'].map((name) => at('m_rot', name).find((r) => r.headers['webhook-id'] === id)!);
    expect(verifies(secret, b!)).toBe(true);
    expect(verifies(two!.secret, b!)).toBe(false);
    // The others: one signature each, by the secret they had.
    for (const [request, ep] of [[a!, one!], [c!, three!]] as const) {
      expect(String(request.headers['webhook-signature']).split(' ')).toHaveLength(1);
      expect(verifies(ep.secret, request)).toBe(true);
    }
  });

  it('delivers a retry of one endpoint to that endpoint alone', async () => {
    answers.set('m_retry/flaky', (n) => (n === 0 ? 500 : 204));
    // The steady one first: a retry that lost its endpoint would go to the merchant's first.
    await merchant('m_retry', [endpoint('m_retry', 'steady'), endpoint('m_retry', 'flaky')]);
    const id = await publish('m_retry', 'payout');
    await waitFor('the retry delivered', () => at('m_retry', 'flaky').length === 2, 10_000);
    await waitFor('its wait ended', async () => (await database.query('SELECT 1 FROM webhook_waits WHERE merchant_id = $1', ['m_retry'])).rows.length === 0, 5_000);
    expect(ids(at('m_retry', 'flaky'))).toEqual([id, id]);
    expect(ids(at('m_retry', 'steady'))).toEqual([id]);
  });

  it("keeps delivering to an endpoint while another of the merchant's hangs at its in-flight bound", async () => {
    answers.set('m_slow/hangs', () => 'hang');
    await merchant('m_slow', [endpoint('m_slow', 'hangs'), endpoint('m_slow', 'fast')]);
    // More than the hanging endpoint's share (half of DISPATCH_CONCURRENCY, on each dispatcher).
    const sent = await Promise.all(Array.from({ length: 40 }, () => publish('m_slow', 'payout')));
    const started = Date.now();
    await waitFor('the fast endpoint has them all', () => sent.every((id) => ids(at('m_slow', 'fast')).includes(id)), 15_000);
    // Its own share: nothing of it waited for the hanging one's (sharing it, the fast one's were
    // set aside as busy until the hanging requests timed out, DELIVERY_TIMEOUT_MS).
    expect(Date.now() - started).toBeLessThan(4_000);
    expect(at('m_slow', 'fast')).toHaveLength(40);
    answers.set('m_slow/hangs', () => 204);
  });

  it("does not park an endpoint's retries behind another endpoint's open circuit", async () => {
    // 500, not 503: a 503 also halves the endpoint's adaptive rate, and at the 0.5/s it falls to the
    // five failures that open the circuit took 4-8 s, past the deadline under CI's load.
    answers.set('m_circuit/dead', () => 500);
    // The alive one fails once each of the webhooks published once the dead circuit is open, and
    // only four of them: five first attempts failing in a row on one dispatcher would open the
    // alive endpoint's own circuit there (and park its retries until the probe, 30 s on).
    let failing = false;
    const retried = new Set<string>();
    answers.set('m_circuit/alive', (_n, req) => {
      const id = String(req.headers['webhook-id']);
      if (!failing || retried.has(id)) return 204;
      retried.add(id);
      return 500;
    });
    await merchant('m_circuit', [endpoint('m_circuit', 'dead'), endpoint('m_circuit', 'alive')]);
    // The dead one's circuit opens (five failures in a row) and its waits park behind it.
    for (let i = 0; i < 6; i++) await publish('m_circuit', 'payout');
    await waitFor('the dead circuit is open', async () => (await database.query('SELECT 1 FROM wait_circuits WHERE merchant_id = $1', ['m_circuit'])).rows.length > 0, 10_000);
    failing = true;
    const later = await Promise.all(Array.from({ length: 4 }, () => publish('m_circuit', 'payout')));
    // Each fails once on the alive endpoint, and its retry 100 ms later is delivered; meanwhile none
    // of the alive endpoint's waits is parked (behind the dead one's circuit it would be, until its
    // schedule's span ends), while the dead one's are.
    const parked = { alive: 0, dead: 0 };
    await waitFor('the alive endpoint delivered each retry', async () => {
      const { rows } = await database.query<{ endpoint_id: string; n: number }>(
        'SELECT endpoint_id, count(*)::int AS n FROM webhook_waits WHERE merchant_id = $1 AND parked GROUP BY endpoint_id', ['m_circuit']);
      for (const row of rows) if (row.endpoint_id === 'ep_m_circuit_alive') parked.alive += row.n; else parked.dead += row.n;
      return later.every((id) => ids(at('m_circuit', 'alive')).filter((x) => x === id).length === 2);
    }, 20_000, 10); // a deadline: ~1 s on a quiet machine, over 5 s once under CI's load
    expect(parked.alive).toBe(0);
    expect(parked.dead).toBeGreaterThan(0);
    const circuits = await database.query<{ endpoint_id: string }>('SELECT endpoint_id FROM wait_circuits WHERE merchant_id = $1', ['m_circuit']);
    expect(circuits.rows.map((r) => r.endpoint_id)).toEqual(['ep_m_circuit_dead']);
  });

  it('auto-disables the failing endpoint alone, names it in endpoint.disabled, and the others keep delivering', async () => {
    // 500, not 503: a 503 also slows the endpoint's throttle (a 429/503 halves its rate), whose
    // throttled waits are no failures, so its failing clock went stale and began again 10 s later.
    answers.set('m_auto/dead', () => 500);
    await merchant('m_auto', [endpoint('m_auto', 'dead'), endpoint('m_auto', 'alive')]);
    let running = true;
    const traffic = (async () => {
      while (running) {
        await publish('m_auto', 'payout');
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    })();
    try {
      await waitFor('the dead endpoint is disabled', () => dispatchers.every((d) => d.merchants.byId('m_auto')?.endpoints[0]?.enabled === false), DISABLE_AFTER_MS * 8); // as operational-events: the failing clock's tenths come through the wait rows, slower on a loaded machine
    } finally {
      running = false;
      await traffic;
    }
    // The test's own directory hears of the disable as the dispatchers do, not before them.
    await waitFor("the test's directory holds the disable", () => directory.byId('m_auto')?.endpoints[0]?.enabled === false, 15_000);
    const [dead, alive] = directory.byId('m_auto')!.endpoints;
    expect(dead).toMatchObject({ id: 'ep_m_auto_dead', enabled: false, disabledReason: 'failing' });
    expect(alive).toMatchObject({ id: 'ep_m_auto_alive', enabled: true });
    expect(alive!.disabledReason).toBeUndefined();
    await waitFor('endpoint.disabled', () => operational.some((e) => e.type === 'endpoint.disabled' && e.data.merchantId === 'm_auto'), 5_000);
    const disabled = operational.filter((e) => e.type === 'endpoint.disabled' && e.data.merchantId === 'm_auto');
    expect(disabled).toHaveLength(1);
    expect(disabled[0]!.data).toMatchObject({ endpointId: 'ep_m_auto_dead', url: `${receiver.url}/m_auto/dead`, reason: 'failing' });
    const before = at('m_auto', 'dead').length;
    const id = await publish('m_auto', 'payout');
    await waitFor('the alive endpoint gets a new event', () => ids(at('m_auto', 'alive')).includes(id), 5_000);
    expect(ids(at('m_auto', 'dead'))).not.toContain(id);
    expect(at('m_auto', 'dead').length).toBeLessThanOrEqual(before + 4); // retries of webhooks accepted before
  });

  it('stops sending to a deleted endpoint within a second on every dispatcher', async () => {
    await merchant('m_del', [endpoint('m_del', 'gone'), endpoint('m_del', 'kept')]);
    let running = true;
    const traffic = (async () => {
      while (running) {
        await Promise.all([publish('m_del', 'payout'), publish('m_del', 'payout')]);
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    })();
    let deletedAt = 0;
    try {
      await waitFor('both endpoints receive', () => at('m_del', 'gone').length > 5 && at('m_del', 'kept').length > 5, 10_000);
      const handled = dispatchers.map((d) => d.dispatcher.stats.delivered);
      await endpoints.delete('m_del', 'ep_m_del_gone');
      deletedAt = Date.now();
      // Both dispatchers see it within the second, and both go on delivering meanwhile.
      await waitFor('every dispatcher drops it', () => dispatchers.every((d) => d.merchants.byId('m_del')?.endpoints.length === 1), 1_000);
      const keptBefore = at('m_del', 'kept').length;
      await waitFor('more deliveries to the kept one, from both dispatchers', () =>
        at('m_del', 'kept').length > keptBefore + 20 && dispatchers.every((d, i) => d.dispatcher.stats.delivered > handled[i]! + 5), 10_000);
    } finally {
      running = false;
      await traffic;
    }
    const late = at('m_del', 'gone').filter((r) => r.at > deletedAt + 1_000);
    expect(late).toHaveLength(0);
  });

  it('sends a webhook held for its throttle slot to the URL the endpoint has then, signed with the secret it has then', async () => {
    // One a second: of two events published together, one is held in memory up to a second for its slot.
    const moving = endpoint('m_moved', 'old', { maxPerSecond: 1 });
    await merchant('m_moved', [moving]);
    const sent = await Promise.all([publish('m_moved', 'payout'), publish('m_moved', 'payout')]);
    await waitFor('the first at the old URL', () => at('m_moved', 'old').length === 1, 10_000);
    const second = sent.find((id) => id !== ids(at('m_moved', 'old'))[0])!;
    // Moved (the old server is gone, or another's), and its leaked secret replaced at once, while the other is held.
    await endpoints.patch('m_moved', moving.id, { url: `${receiver.url}/m_moved/new` });
    const { secret } = await endpoints.rotate('m_moved', moving.id, 0);
    await waitFor('both dispatchers hold the change', () => dispatchers.every((d) => d.merchants.byId('m_moved')?.endpoints[0]?.secret === secret), 5_000);
    await waitFor('the second sent', () => at('m_moved', 'old').length + at('m_moved', 'new').length === 2, 10_000);
    expect(ids(at('m_moved', 'old'))).not.toContain(second);
    expect(ids(at('m_moved', 'new'))).toEqual([second]);
    expect(verifies(secret, at('m_moved', 'new')[0]!)).toBe(true);
  });

  it("moves an endpoint's queued webhooks to its new rate when maxPerSecond is raised or removed: the backlog drains within about a second", async () => {
    const paced = endpoint('m_raised', 'paced', { maxPerSecond: 4 });
    await merchant('m_raised', [paced]);
    const throttled = async () => Number((await db.query<{ n: string }>("SELECT count(*) AS n FROM webhook_waits WHERE merchant_id = 'm_raised' AND reason = 'throttled'"))[0]!.n);
    // Twice: a raise (4/s to 1,000/s), then, throttled again, an unset. Each leaves some 30 webhooks
    // queued at 4/s (7 s and more of places): laid out at the old rate, they drained at it.
    for (const [round, change] of [[1, { maxPerSecond: 1000 }], [2, { maxPerSecond: null }]] as const) {
      if (round === 2) {
        await endpoints.patch('m_raised', paced.id, { maxPerSecond: 4 });
        await waitFor('both dispatchers hold 4/s again', () => dispatchers.every((d) => d.merchants.byId('m_raised')?.endpoints[0]?.maxPerSecond === 4), 5_000);
      }
      const before = at('m_raised', 'paced').length;
      await Promise.all(Array.from({ length: 40 }, () => publish('m_raised', 'payout')));
      // Every webhook has its place (a wait, or a slot held in memory, at most a second's worth): a place
      // taken before the change but written after it keeps its old time (merchants.md), which is not this case.
      await waitFor('the backlog queued', async () => (await throttled()) + at('m_raised', 'paced').length - before >= 35, 10_000);
      await endpoints.patch('m_raised', paced.id, change);
      const changedAt = Date.now();
      await waitFor(`round ${round}: every webhook delivered`, () => at('m_raised', 'paced').length >= before + 40, 15_000);
      const drainedMs = Math.max(...at('m_raised', 'paced').map((r) => r.at)) - changedAt;
      if (drainedMs >= 5_000) {
        // What a slow drain looked like (it failed once in a loaded CI run): when each webhook arrived.
        console.error(`round ${round}: arrivals after the change (ms)`, at('m_raised', 'paced').slice(before).map((r) => r.at - changedAt));
      }
      // At 4/s what was queued took 7 s and more (9.4 s seen); moved to the new rate, a second and the hand-back's
      // poll. 5 s, not 2.5: a loaded CI run took 2.6 s, and 5 s still tells the two apart.
      expect(drainedMs).toBeLessThan(5_000);
    }
    expect(new Set(ids(at('m_raised', 'paced'))).size).toBe(80);
  }, 60_000);

  // The figure is an endpoint dead for 5 minutes under load; 5 s of 20 events a second here
  // (a bench can run the long one): a third of them hang till DELIVERY_TIMEOUT_MS, again and again.
  // Last: the hanging endpoint's retries go on a while after it.
  it('keeps the latency of two endpoints while the third hangs under a steady load', async () => {
    answers.set('m_load/dead', () => 'hang');
    await merchant('m_load', [endpoint('m_load', 'dead'), endpoint('m_load', 'a'), endpoint('m_load', 'b')]);
    const sentAt = new Map<string, number>();
    for (let i = 0; i < 100; i++) {
      sentAt.set(await publish('m_load', 'payout'), Date.now());
      await new Promise((resolve) => setTimeout(resolve, 50)); // pacing the load, not waiting for an outcome
    }
    await waitFor('both live endpoints have every event', () => ['a', 'b'].every((name) => at('m_load', name).length >= 100), 20_000);
    for (const name of ['a', 'b']) {
      const latencies = at('m_load', name).map((r) => r.at - sentAt.get(String(r.headers['webhook-id']))!).sort((x, y) => x - y);
      // Not at idle: the hanging endpoint's copies that ran out of deferrals (MAX_DEFERRALS, 100 ms
      // apart with this schedule) wait for its slots holding prefetch slots of the dispatcher, as a
      // merchant's do (p95 0.6 to 4 s seen on the shared machine). Sharing its in-flight bound, the
      // live endpoints' never all arrived within 20 s. The idle figure is for a bench.
      expect(latencies[Math.ceil(0.95 * latencies.length) - 1]).toBeLessThan(5_000);
    }
    answers.set('m_load/dead', () => 204);
  });
});
