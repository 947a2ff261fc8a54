/**
 * @runs-quiet times the waits due during a 15 s PostgreSQL crash to within 10 s of its return, as waits-outage does: beside the parallel files and the cluster's nodes on a slow machine's CI one of 27 was late, twice in three runs (alone and beside three busy loops here: within it)
 */
import { Webhook } from 'standardwebhooks';
import type { ApiProgram } from '../../apps/api/program.js';
import { PREFETCH_PER_SLOT } from '../../apps/dispatcher/dispatcher.js';
import type { DispatcherProgram } from '../../apps/dispatcher/program.js';
import { sampleEvent } from '../../libs/contracts/index.js';
import { openPostgres } from '../../libs/delivery-store/index.js';
import { EventPublisher } from '../../libs/publisher/index.js';
import { adminToken, type Answer, call, startTestApi, token, waitReady } from '../support/api.js';
import { TestBroker, uniquePrefix } from '../support/broker.js';
import { startDatabaseDispatcher, TEST_SECRETS_KEY } from '../support/dispatcher-program.js';
import { PrivatePostgres } from '../support/private-postgres.js';
import { type ReceivedRequest, Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';
import { firstEndpointPath, putMerchantWithEndpoint, rotateFirstEndpoint } from '../support/merchant-endpoints.js';

/**
 * 15 s (it was 30, then 20): the held waits reach the prefetch within seconds (the last request 1.5 s
 * after the crash, load 8-10), leaving 5 s for that and the last 10 s to show consumption paused.
 */
const OUTAGE_MS = 15_000;
/** A small prefetch (twice DISPATCH_CONCURRENCY), so that the bound on what is held is reached early in the outage. */
const CONCURRENCY = 8;
const PREFETCH = PREFETCH_PER_SLOT * CONCURRENCY;
/** What issue 54 promises: waits that fell due during the outage go out within this of its return. */
const BACK_WITHIN_MS = 10_000;

/**
 * Issue 44: the delivery path does not wait for PostgreSQL. With the merchants' database crashed
 * for 15 s under a steady stream of events, dispatchers keep delivering first attempts from their
 * cache, each signed with the merchant's current secret; admin writes and resends answer 503 with
 * Retry-After; a dispatcher that starts meanwhile waits for the database; and all of it recovers
 * by itself when the database is back. A server of the test's own is crashed, not the machine's,
 * so other tests may run beside it.
 *
 * Issue 54 (waits are rows), "PostgreSQL down": a webhook that must wait is held unacked until its
 * wait is written, at most the prefetch of them (beyond it consumption pauses); nothing is lost,
 * not even a wait acked just before the crash (the server keeps async commits in memory for 10 s:
 * a wait written with synchronous_commit off would be lost); and the waits that fell due during
 * the outage go out within 10 s of its return.
 *
 * Every other webhook of each merchant is refused at its first attempt, the rest are delivered at
 * once; the endpoints stay healthy for the circuit breaker, whose open circuit would postpone or
 * fail the waits (its business, not this test's).
 */
describe('the merchants database stopped for 15 s under load', () => {
  const prefix = uniquePrefix('merchant-outage');
  let server: PrivatePostgres | undefined;
  let receiver: Receiver;
  let api: ApiProgram;
  let dispatcher: DispatcherProgram;
  let late: DispatcherProgram | undefined;

  beforeAll(async () => {
    server = await PrivatePostgres.start();
    // Every other new webhook of each merchant is refused at its first attempt (409): it must wait
    // for a retry. A 4xx leaves the circuit closed (the endpoint answers), whichever dispatcher sees
    // which answers: with 503s, a dispatcher that saw five in a row opened it, and its waits, their
    // short schedule spent, went to failed (the regression issue 54 left open).
    const attempts = new Map<string, number>();
    const fresh = new Map<string, number>();
    receiver = await Receiver.start((_n, req) => {
      const id = String(req.headers['webhook-id']);
      const n = (attempts.get(id) ?? 0) + 1;
      attempts.set(id, n);
      if (n > 1) return 204;
      const index = fresh.get(req.path) ?? 0;
      fresh.set(req.path, index + 1);
      if (index % 2 === 1) return 204;
      refused.add(req);
      return 409;
    });
  }, 60_000);

  afterAll(async () => {
    await late?.stop();
    await dispatcher?.stop();
    await api?.stop();
    await receiver?.close();
    const test = await TestBroker.open();
    await test.deleteTopology(prefix);
    await test.close();
    await server?.stop();
  });

  it('holds what must wait, loses nothing, sends the waits due within 10 s of its return, signs with the right secret; writes answer 503 meanwhile; everything recovers by itself', async () => {
    if (!server) {
      console.warn('skipped: no PostgreSQL server binaries (PG_BIN_DIR) to run a private server that can be stopped');
      return;
    }
    const env = { DATABASE_URL: server.url, SECRETS_KEY: TEST_SECRETS_KEY, WEBHOOKS_DEV: 'true', ALLOW_PRIVATE_TARGETS: 'true' };
    const dispatcherEnv = { RETRY_SCHEDULE: '500ms,500ms,500ms', DISPATCH_CONCURRENCY: String(CONCURRENCY) };
    api = await waitReady(await startTestApi(prefix, [], {}, env));
    dispatcher = await startDatabaseDispatcher(prefix, server.url, dispatcherEnv, { merchantsPollMs: 1_000 });
    const auth = { authorization: `Bearer ${await adminToken()}`, 'content-type': 'application/json' };
    const admin = (method: string, path: string, body?: unknown) => call(api, path, { method, headers: auth, body: body === undefined ? undefined : JSON.stringify(body) });

    const ids = ['m_one', 'm_two', 'm_three'];
    for (const id of ids) expect((await putMerchantWithEndpoint(api, id, { publicKey: `pk_${id}_outage`, url: `${receiver.url}/${id}` }, auth)).status).toBe(201);
    // m_one's secret replaced at once: only the new one may sign from now on.
    const rotated = await rotateFirstEndpoint(api, 'm_one', { graceSeconds: 0 }, auth);
    const mTwo = await firstEndpointPath(api, 'm_two', auth);
    const secrets = new Map<string, string>([['m_one', (rotated.body as any).data.secret]]);
    for (const id of ids.slice(1)) {
      await waitFor(`${id} in the dispatcher`, () => dispatcher.merchants.byId(id)?.endpoints[0], 5_000);
      secrets.set(id, dispatcher.merchants.byId(id)!.endpoints[0]!.secret);
    }
    await waitFor('the dispatcher signs with the rotated secret', () => dispatcher.merchants.byId('m_one')?.endpoints[0]?.secret === secrets.get('m_one'), 5_000);

    const publisher = new EventPublisher(dispatcher.broker, prefix);
    const published = new Map<string, { merchantId: string; at: number }>();
    let publishing = true;
    const load = (async () => {
      for (let n = 0; publishing; n++) {
        const merchantId = ids[n % ids.length]!;
        const { messageId } = await publisher.publish(sampleEvent('payout', merchantId));
        published.set(messageId, { merchantId, at: Date.now() });
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    })();

    // Some waits written (and acked) just before the crash: with asynchronous commits they would be lost with it.
    await waitFor('load flowing and waits written', () => published.size >= 20 && dispatcher.dispatcher.stats.retried >= 3, 10_000);
    await server.crash();
    const downAt = Date.now();
    let upAt = 0;
    try {
      // Writes and resends answer 503 with Retry-After while it is away; reads of the cache still work.
      const write = await waitFor('a write refused as unavailable', async () => {
        const answer = await admin('PATCH', mTwo, { enabled: false });
        return answer.status === 503 && answer;
      }, 10_000, 200);
      expect(errorOf(write)).toBe('service_unavailable');
      expect(Number(write.headers.get('retry-after'))).toBeGreaterThan(0);
      const resend = await call(api, '/nucleus/tnx/webhook?reference=anything', { headers: { 'x-auth-token': 'pk_m_two_outage', authorization: `Bearer ${await token('m_two')}` } });
      expect([resend.status, errorOf(resend)]).toEqual([503, 'service_unavailable']);
      expect(Number(resend.headers.get('retry-after'))).toBeGreaterThan(0);
      expect((await admin('GET', '/admin/merchants/m_two')).status).toBe(200);
      const trail = await admin('GET', '/admin/merchants/m_two/audit');
      expect([trail.status, errorOf(trail)]).toEqual([503, 'service_unavailable']);

      // A dispatcher started now waits for the database instead of failing or running without merchants.
      let lateStarted = false;
      // The default concurrency: it takes nothing before the return, and drains the backlog after it.
      const starting = startDatabaseDispatcher(prefix, server.url, { RETRY_SCHEDULE: dispatcherEnv.RETRY_SCHEDULE }).then((program) => {
        lateStarted = true;
        late = program;
        return program;
      });
      await waitFor('the outage has lasted', () => Date.now() - downAt >= OUTAGE_MS, OUTAGE_MS + 5_000, 500);
      expect(lateStarted).toBe(false);
      const during = receiver.requests.filter((r) => r.at > downAt);
      // First attempts went out from the cached merchants (signed with the right secret: below).
      expect(during.filter((r) => ok(r)).length).toBeGreaterThan(0);
      // What must wait is held unacked, at most the prefetch of it (with what the hand-backs made
      // just before the crash delivered, whose ends wait too); then consumption paused: nothing in
      // the outage's last 10 s, though events kept coming and wait in dispatch.
      const waiting = new Set(during.filter((r) => !ok(r)).map((r) => String(r.headers['webhook-id'])));
      expect(waiting.size).toBeGreaterThan(0);
      expect(waiting.size).toBeLessThanOrEqual(PREFETCH);
      expect(during.filter((r) => r.at > downAt + OUTAGE_MS - 10_000)).toEqual([]);
      expect([...published.values()].filter((p) => p.at > downAt + OUTAGE_MS - 10_000).length).toBeGreaterThan(0);
      await server.up();
      upAt = Date.now();
      await starting;
    } finally {
      publishing = false;
      await load;
    }

    // Every wait due by the return (a first attempt failed before it) goes out within 10 s of it.
    const dueByReturn = new Set(receiver.requests.filter((r) => r.at < upAt && !ok(r)).map((r) => String(r.headers['webhook-id'])));
    await waitFor('the waits due during the outage sent', () => [...dueByReturn].every((id) => sentAt(receiver, id) !== undefined), BACK_WITHIN_MS + 5_000, 100).catch(async (err: Error) => {
      const unsent = [...dueByReturn].filter((id) => sentAt(receiver, id) === undefined);
      // What the rows say of them, and when each was refused, against the crash and the return.
      const db = openPostgres(server!.url);
      const rows = await db.query(`SELECT webhook_id, attempt, reason, hand, takes, parked, extract(epoch FROM due_at) * 1000 - $2 AS due, extract(epoch FROM pick_at) * 1000 - $2 AS pick
        FROM webhook_waits WHERE webhook_id = ANY($1)`, [unsent, upAt]).finally(() => db.close());
      const refusedAt = unsent.map((id) => receiver.requests.filter((r) => r.headers['webhook-id'] === id).map((r) => r.at - upAt));
      throw new Error(`${err.message}: ${unsent.length} of ${dueByReturn.size} not sent; crash at ${downAt - upAt} ms from the return; requests at ${JSON.stringify(refusedAt)}; rows ${JSON.stringify(rows.rows)}`);
    });
    expect(Math.max(...[...dueByReturn].map((id) => sentAt(receiver, id)!)) - upAt).toBeLessThanOrEqual(BACK_WITHIN_MS);

    // Nothing lost: every webhook published before, during and after the outage arrived, signed with its merchant's current secret.
    const missing = () => [...published.keys()].filter((id) => sentAt(receiver, id) === undefined);
    await waitFor('every published webhook delivered', () => missing().length === 0, 30_000, 200).catch((err: Error) => {
      throw new Error(`${err.message}: ${missing().length} of ${published.size} missing (${dispatcher.dispatcher.stats.failed + (late?.dispatcher.stats.failed ?? 0)} failed)`);
    });
    for (const request of receiver.requests) {
      const merchantId = published.get(String(request.headers['webhook-id']))?.merchantId;
      if (!merchantId) continue;
      expect(() => new Webhook(secrets.get(merchantId)!).verify(request.body, request.headers as Record<string, string>)).not.toThrow();
      expect(String(request.headers['webhook-signature']).split(' ')).toHaveLength(1);
    }

    // Recovered by itself: writes work again, and both dispatchers see them.
    const enabled = await waitFor('writes accepted again', async () => {
      const answer = await admin('PATCH', mTwo, { url: `${receiver.url}/m_two/moved` });
      return answer.status === 200 && answer;
    }, 15_000, 200);
    expect(enabled.status).toBe(200);
    for (const program of [dispatcher, late!]) {
      await waitFor('a dispatcher sees the change made after the outage', () => program.merchants.byId('m_two')?.endpoints[0]?.url === `${receiver.url}/m_two/moved`, 5_000);
    }
  }, 150_000);
});

function errorOf(answer: Answer): string | undefined {
  return (answer.body as { error: { code: string } | null }).error?.code;
}

/** The requests the receiver refused (409: a first attempt that must wait). */
const refused = new WeakSet<ReceivedRequest>();

function ok(request: ReceivedRequest): boolean {
  return !refused.has(request);
}

/** When this webhook was delivered (answered 2xx), if it was. */
function sentAt(receiver: Receiver, webhookId: string): number | undefined {
  return receiver.requests.find((r) => r.headers['webhook-id'] === webhookId && ok(r))?.at;
}
