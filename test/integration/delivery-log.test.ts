import type { ApiProgram } from '../../apps/api/program.js';
import { BrokerConnection } from '../../libs/broker/index.js';
import { type DeliveryRecordInput, DeliveryRecorder } from '../../libs/delivery-log/index.js';
import { DeliveryLogRecorder, deliveryLogQueries, openPostgres, type Database } from '../../libs/delivery-store/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { adminToken, call, expectDocumented, seen, startTestApi, token } from '../support/api.js';
import { brokerUrl, TestBroker, uniquePrefix } from '../support/broker.js';
import { runCliInProcess } from '../support/cli.js';
import { testMerchant } from '../support/harness.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';
import { waitFor } from '../support/wait.js';

const minutesAgo = (m: number) => new Date(Date.now() - m * 60_000).toISOString();

describe('the delivery log through the API', () => {
  const prefix = uniquePrefix('delivery-log');
  const alice = testMerchant('m_alice', 'https://alice.example/hooks');
  const bob = testMerchant('m_bob', 'https://bob.example/hooks', { endpoints: [] });
  let db: TestDatabase;
  let database: Database;
  let test: TestBroker;
  let broker: BrokerConnection;
  let writer: DeliveryRecorder;
  let recorder: DeliveryLogRecorder;
  let api: ApiProgram;

  const headersOf = async (merchant: typeof alice) => ({ 'x-auth-token': merchant.publicKey, authorization: `Bearer ${await token(merchant.id)}` });
  const get = async (merchant: typeof alice, path: string) => call(api, path, { method: 'GET', headers: await headersOf(merchant) });
  const adminGet = async (path: string) => {
    const jwt = await adminToken('webhooks:admin', 'ops');
    return call(api, path, { method: 'GET', headers: { authorization: `Bearer ${jwt}` } });
  };

  // A failing-then-recovering merchant: 500, circuit open (postponed), timeout, then 200.
  const firstSeenAt = minutesAgo(10);
  const payload = { event: 'charge.completed', data: { tnxRef: 'tx-recover', amount: 1000 } };
  const base = { webhookId: 'wh_recover', merchantId: alice.id, event: 'charge.completed', references: ['tx-recover'], payload: JSON.stringify(payload), firstSeenAt };
  const story: DeliveryRecordInput[] = [
    { ...base, at: minutesAgo(9), outcome: 'retrying', attemptNumber: 1, nextAttemptAt: minutesAgo(8),
      attempt: { startedAt: minutesAgo(9), durationMs: 12, httpStatus: 500, error: 'HTTP 500', responseBody: 'upstream down' } },
    { ...base, at: minutesAgo(8), outcome: 'postponed', attemptNumber: 1, reason: 'circuit-open', nextAttemptAt: minutesAgo(7) },
    { ...base, at: minutesAgo(7), outcome: 'retrying', attemptNumber: 2, nextAttemptAt: minutesAgo(6),
      attempt: { startedAt: minutesAgo(7), durationMs: 5000, error: 'timeout after 5000 ms' } },
    { ...base, at: minutesAgo(6), outcome: 'delivered', attemptNumber: 3,
      attempt: { startedAt: minutesAgo(6), durationMs: 8, httpStatus: 200, responseBody: '{"ok":true}' } },
  ];
  const other: DeliveryRecordInput = {
    webhookId: 'wh_other', merchantId: alice.id, event: 'payout', references: ['po-1'], firstSeenAt: minutesAgo(5),
    payload: JSON.stringify({ event: 'payout', data: { reference: 'po-1' } }), at: minutesAgo(5), outcome: 'delivered', attemptNumber: 1,
    attempt: { startedAt: minutesAgo(5), durationMs: 4, httpStatus: 204 },
  };
  const skipped: DeliveryRecordInput = {
    webhookId: 'wh_bob_skipped', merchantId: bob.id, event: 'refund.completed', references: ['rf-1', 'tx-bob'], firstSeenAt: minutesAgo(4),
    payload: JSON.stringify({ event: 'refund.completed', data: { refundRef: 'rf-1', tnxRef: 'tx-bob' } }), at: minutesAgo(4),
    outcome: 'skipped', attemptNumber: 0, reason: 'webhook-disabled',
  };

  beforeAll(async () => {
    db = await createTestDatabase('delivery_log');
    test = await TestBroker.open();
    broker = new BrokerConnection({ url: brokerUrl(), name: 'delivery-log-test', logger: silentLogger() });
    await broker.open();
    writer = new DeliveryRecorder(broker, silentLogger(), { prefix });
    await writer.start();
    database = openPostgres(db.url);
    recorder = new DeliveryLogRecorder(broker, database, silentLogger(), { prefix, retentionMs: 30 * 86_400_000, retryMs: 200 });
    await recorder.start();
    // Its tables are made once it leads, in the background: asked before, they do not exist yet
    // (met with the test files in parallel on a 2-core machine).
    await waitFor('the recorder leading', () => recorder.state.leading, 30_000);
    api = await startTestApi(prefix, [alice, bob], {}, { DATABASE_URL: db.url, DELIVERY_LOG: 'on' });

    // Written through the writer, the way the dispatcher does: each resolves once confirmed.
    await Promise.all([...story, other, skipped].map((r) => writer.record(r)));
    await waitFor('every record stored', async () => (await db.query<{ n: string }>('SELECT count(*) AS n FROM delivery_records'))[0]!.n === '6', 20_000);
  });

  afterAll(async () => {
    await api?.stop();
    await writer?.stop();
    await recorder?.stop();
    await database?.close();
    await broker?.close();
    await test?.deleteTopology(prefix);
    await test?.close();
    await db?.drop();
  });

  it('lists a failing-then-recovering webhook as delivered after 3 attempts, newest first', async () => {
    const list = await get(alice, '/nucleus/webhooks');
    expect(list.status).toBe(200);
    const { webhooks, nextCursor } = (list.body as { data: { webhooks: Array<Record<string, unknown>>; nextCursor: string | null } }).data;
    expect(webhooks.map((w) => w.webhookId)).toEqual(['wh_other', 'wh_recover']);
    expect(nextCursor).toBeNull();
    expect(webhooks[1]).toEqual({
      webhookId: 'wh_recover',
      // Recorded without an endpoint (as before endpoints fanned out).
      endpointId: null,
      event: 'charge.completed',
      references: ['tx-recover'],
      status: 'delivered',
      attempts: 3,
      firstSeenAt,
      firstAttemptAt: story[0]!.attempt!.startedAt,
      lastAttemptAt: story[3]!.attempt!.startedAt,
      lastHttpStatus: 200,
      lastError: 'timeout after 5000 ms',
      nextAttemptAt: null,
    });
    const byReference = await get(alice, '/nucleus/webhooks?reference=tx-recover&status=delivered');
    expect((byReference.body as { data: { webhooks: unknown[] } }).data.webhooks).toHaveLength(1);
  });

  it('shows the webhook with its payload and every attempt, and the postponement that was not one', async () => {
    const detail = await get(alice, '/nucleus/webhooks/wh_recover');
    expect(detail.status).toBe(200);
    const data = (detail.body as { data: { payload: unknown; records: Array<Record<string, unknown>> } }).data;
    expect(data.payload).toEqual(payload);
    expect(data.records.map((r) => [r.outcome, r.attemptNumber, r.httpStatus, r.reason])).toEqual([
      ['retrying', 1, 500, null],
      ['postponed', 1, null, 'circuit-open'],
      ['retrying', 2, null, null],
      ['delivered', 3, 200, null],
    ]);
    expect(data.records[0]).toMatchObject({ durationMs: 12, responseBody: 'upstream down', error: 'HTTP 500', startedAt: story[0]!.attempt!.startedAt });
    expect(data.records[1]).toMatchObject({ startedAt: null, durationMs: null, nextAttemptAt: story[1]!.nextAttemptAt });
  });

  it('reads a reference\'s webhooks with every attempt in one statement, the same as each detail by id', async () => {
    const log = deliveryLogQueries(database);
    const detail = (await get(alice, '/nucleus/webhooks/wh_recover')).body as { data: unknown };
    expect((await log.listWebhookDetails(alice.id, { reference: 'tx-recover', limit: 10 })).webhooks).toEqual([detail.data]);
    expect((await log.listWebhookDetails(bob.id, { reference: 'tx-recover', limit: 10 })).webhooks).toEqual([]);
    const first = await log.listWebhookDetails(alice.id, { limit: 1 });
    expect(first.webhooks.map((w) => [w.webhookId, w.records.length])).toEqual([['wh_other', 1]]);
    const second = await log.listWebhookDetails(alice.id, { limit: 1, cursor: first.nextCursor! });
    expect(second).toEqual({ webhooks: [detail.data], nextCursor: null });
  });

  it('finds the attempts of a webhook in the days after the one it was first seen on', async () => {
    const twoDaysAgo = minutesAgo(2 * 24 * 60);
    const late = {
      webhookId: 'wh_late', merchantId: 'm_carol', event: 'payout', references: ['po-late'], firstSeenAt: twoDaysAgo,
      payload: JSON.stringify({ event: 'payout', data: { reference: 'po-late' } }),
    };
    await writer.record({ ...late, at: twoDaysAgo, outcome: 'retrying', attemptNumber: 1, attempt: { startedAt: twoDaysAgo, durationMs: 3, httpStatus: 503 } });
    await writer.record({ ...late, at: minutesAgo(1), outcome: 'delivered', attemptNumber: 2, attempt: { startedAt: minutesAgo(1), durationMs: 3, httpStatus: 200 } });
    const log = deliveryLogQueries(database);
    await waitFor('both attempts stored', async () => (await log.getWebhook('m_carol', 'wh_late'))?.attempts === 2, 10_000);
    const byId = await log.getWebhook('m_carol', 'wh_late');
    expect(byId?.records.map((r) => r.httpStatus)).toEqual([503, 200]);
    expect((await log.listWebhookDetails('m_carol', { reference: 'po-late', limit: 10 })).webhooks).toEqual([byId]);
  });

  it('gives the feed in one stable order, agreeing with the list, and nothing after its last cursor', async () => {
    const feed = await get(alice, '/nucleus/events');
    const { events, nextCursor } = (feed.body as { data: { events: Array<Record<string, unknown>>; nextCursor: string } }).data;
    expect(events.map((e) => [e.webhookId, e.status])).toEqual([
      ['wh_recover', 'delivered'],
      ['wh_other', 'delivered'],
    ]);
    expect(events[0]!.payload).toEqual(payload);
    const again = await get(alice, `/nucleus/events?after=${nextCursor}`);
    expect((again.body as { data: { events: unknown[]; nextCursor: string } }).data).toEqual({ events: [], nextCursor });
    const page = await get(alice, `/nucleus/events?limit=1`);
    const first = (page.body as { data: { events: Array<{ webhookId: string }>; nextCursor: string } }).data;
    const rest = await get(alice, `/nucleus/events?after=${first.nextCursor}`);
    expect((rest.body as { data: { events: Array<{ webhookId: string }> } }).data.events.map((e) => e.webhookId)).toEqual(['wh_other']);
  });

  it('shows a webhook skipped for a disabled merchant as skipped in its feed', async () => {
    const feed = await get(bob, '/nucleus/events');
    const { events } = (feed.body as { data: { events: Array<Record<string, unknown>> } }).data;
    expect(events).toHaveLength(1);
    expect(events[0]).toMatchObject({ webhookId: 'wh_bob_skipped', status: 'skipped', references: ['rf-1', 'tx-bob'] });
    const detail = await get(bob, '/nucleus/webhooks/wh_bob_skipped');
    expect((detail.body as { data: { records: Array<Record<string, unknown>>; attempts: number } }).data).toMatchObject({
      attempts: 0,
      records: [{ outcome: 'skipped', reason: 'webhook-disabled', startedAt: null }],
    });
  });

  it('never shows one merchant another merchant\'s webhooks', async () => {
    expect((await get(bob, '/nucleus/webhooks/wh_recover')).status).toBe(404);
    const list = await get(bob, '/nucleus/webhooks');
    expect((list.body as { data: { webhooks: Array<{ webhookId: string }> } }).data.webhooks.map((w) => w.webhookId)).toEqual(['wh_bob_skipped']);
    const feed = await get(alice, '/nucleus/events');
    expect(JSON.stringify(feed.body)).not.toContain('wh_bob_skipped');
  });

  it('stores a record published twice once, without counting its attempt twice', async () => {
    const duplicate = { ...other, id: '0b3c1a52-9a5e-4c1e-9a86-1a2b3c4d5e6f', webhookId: 'wh_dup' };
    await writer.record(duplicate);
    await writer.record(duplicate);
    await waitFor('the duplicate stored', async () => (await get(alice, '/nucleus/webhooks/wh_dup')).status === 200, 10_000);
    await waitFor('the recorder caught up', () => recorder.state.pending === 0);
    const detail = await get(alice, '/nucleus/webhooks/wh_dup');
    expect((detail.body as { data: { attempts: number; records: unknown[] } }).data).toMatchObject({ attempts: 1, records: [expect.anything()] });
  });

  it('lets an operator read any merchant\'s log under /admin', async () => {
    const list = await adminGet(`/admin/merchants/${alice.id}/webhooks?reference=tx-recover`);
    expect(list.status).toBe(200);
    expect((list.body as { data: { webhooks: Array<{ webhookId: string }> } }).data.webhooks.map((w) => w.webhookId)).toEqual(['wh_recover']);
    expect((await adminGet(`/admin/merchants/${bob.id}/webhooks/wh_bob_skipped`)).status).toBe(200);
    expect((await adminGet(`/admin/merchants/${bob.id}/events`)).status).toBe(200);
    // A merchant's token is not an operator's.
    expect((await call(api, `/admin/merchants/${alice.id}/webhooks`, { method: 'GET', headers: { authorization: `Bearer ${await token(alice.id)}` } })).status).toBe(403);
  });

  it.each([
    ['status=lost', 'invalid_parameter'],
    ['limit=0', 'invalid_parameter'],
    ['limit=many', 'invalid_parameter'],
    ['since=yesterday', 'invalid_parameter'],
    ['event=charge', 'invalid_parameter'],
    ['cursor=not-a-cursor', 'invalid_parameter'],
    ['colour=blue', 'unknown_parameter'],
    ['status=failed&status=delivered', 'invalid_parameter'],
    // Bytes that are not UTF-8: never looked up as the U+FFFD the query parser would put in their place.
    ['reference=tx-%FF', 'invalid_parameter'],
  ])('answers 400 in the envelope for a bad list parameter: %s', async (query, code) => {
    const answer = await get(alice, `/nucleus/webhooks?${query}`);
    expect(answer.status).toBe(400);
    expect(answer.body).toMatchObject({ error: { code, status: 400 }, data: null });
  });

  it('answers 400 for a bad feed cursor and a bad admin merchant id', async () => {
    expect((await get(alice, '/nucleus/events?after=abc')).body).toMatchObject({ error: { code: 'invalid_parameter' } });
    expect((await adminGet('/admin/merchants/-bad/webhooks')).body).toMatchObject({ error: { code: 'invalid_merchant_id' } });
  });

  it('reports in /readyz how far behind the log is', async () => {
    const ready = await waitFor('a lag figure', async () => {
      const answer = await call(api, '/readyz', { method: 'GET' });
      return (answer.body as { deliveryLog: { behindSeconds: number | null } }).deliveryLog.behindSeconds !== null && answer;
    });
    expect(ready.body).toMatchObject({ status: 'ready', deliveryLog: { database: 'up' } });
    expect((ready.body as { deliveryLog: { behindSeconds: number } }).deliveryLog.behindSeconds).toBeLessThan(30);
  });

  it('shows an operator the timeline of a webhook\'s attempts with webhooks log', async () => {
    const env = { DATABASE_URL: db.url };
    const byId = await runCliInProcess(env, ['log', '--merchant', alice.id, '--webhook-id', 'wh_recover']);
    expect(byId.code).toBe(0);
    const lines = byId.stdout.trim().split('\n');
    expect(lines[0]).toContain('wh_recover  charge.completed  tx-recover');
    expect(lines[0]).toContain('delivered, 3 attempt(s)');
    expect(lines.slice(2).map((line) => line.split(/\s{2,}/).slice(1, 5))).toEqual([
      ['retrying', '#1', '12 ms', '500'],
      ['postponed', '-', '-', '-'],
      ['retrying', '#2', '5000 ms', '-'],
      ['delivered', '#3', '8 ms', '200'],
    ]);
    const byReference = await runCliInProcess(env, ['log', '--merchant', bob.id, '--reference', 'tx-bob', '--json']);
    expect(JSON.parse(byReference.stdout)).toMatchObject([{ webhookId: 'wh_bob_skipped', status: 'skipped' }]);
    const list = await runCliInProcess(env, ['log', '--merchant', alice.id]);
    expect(list.stdout).toContain('wh_recover');
    const none = await runCliInProcess(env, ['log', '--merchant', 'm_nobody']);
    expect(none.code).toBe(3);
    const bad = await runCliInProcess(env, ['log', '--merchant', alice.id, '--status', 'lost']);
    expect(bad.code).toBe(2);
  });

  it('matches every answer it gave to the OpenAPI document', () => {
    const statuses = expectDocumented(seen);
    for (const status of ['/nucleus/webhooks 200', '/nucleus/webhooks 400', '/nucleus/webhooks/{webhookId} 404', '/nucleus/events 200']) {
      expect(statuses).toContain(status);
    }
  });
});
