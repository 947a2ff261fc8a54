/**
 * @runs-quiet times other merchants' reads (under 1 s) while one floods the log: the parallel files' load stretched one to 1,019 ms in CI
 */
import type { ApiProgram } from '../../apps/api/program.js';
import { BrokerConnection } from '../../libs/broker/index.js';
import { type DeliveryRecordInput, DeliveryRecorder } from '../../libs/delivery-log/index.js';
import { DeliveryLogRecorder, deliveryLogQueries, openPostgres, type Database, type Queryable } from '../../libs/delivery-store/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { adminToken, call, expectDocumented, seen, startTestApi, token } from '../support/api.js';
import { brokerUrl, TestBroker, uniquePrefix } from '../support/broker.js';
import { testMerchant } from '../support/harness.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';
import { waitFor } from '../support/wait.js';

/** What a client may ask the log for, what it may ask at once, and how much one page may weigh. */
describe('the delivery log\'s limits', () => {
  const prefix = uniquePrefix('delivery-log-limits');
  const alice = testMerchant('m_alice', 'https://alice.example/hooks');
  // Its every query takes 1.5 s (under the API's statement timeout): a merchant with heavy filters.
  const heavy = testMerchant('m_heavy', 'https://heavy.example/hooks');
  // Its every query takes longer than the API's statement timeout.
  const glacial = testMerchant('m_glacial', 'https://glacial.example/hooks');
  const bystander = testMerchant('m_bystander', 'https://bystander.example/hooks');
  const eager = testMerchant('m_eager', 'https://eager.example/hooks');
  const feeder = testMerchant('m_feeder', 'https://feeder.example/hooks');

  let db: TestDatabase;
  let database: Database;
  let test: TestBroker;
  let broker: BrokerConnection;
  let writer: DeliveryRecorder;
  let recorder: DeliveryLogRecorder;
  let api: ApiProgram;
  let slowInFlight = 0;

  const headersOf = async (merchant: typeof alice) => ({ 'x-auth-token': merchant.publicKey, authorization: `Bearer ${await token(merchant.id)}` });
  const get = async (merchant: typeof alice, path: string) => call(api, path, { method: 'GET', headers: await headersOf(merchant) });
  const adminGet = async (path: string) => call(api, path, { method: 'GET', headers: { authorization: `Bearer ${await adminToken('webhooks:admin', 'ops')}` } });
  const cursorOf = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url');

  /** Runs a pg_sleep on the API's own pool before each query of the slow merchants: it holds a real connection. */
  const slowFor = (db: Queryable): Queryable => ({
    async query(text, params) {
      const seconds = params?.[0] === heavy.id ? 1.5 : params?.[0] === glacial.id ? 4 : 0;
      if (seconds === 0) return db.query(text, params);
      slowInFlight += 1;
      try {
        await db.query('SELECT pg_sleep($1)', [seconds]);
        return await db.query(text, params);
      } finally {
        slowInFlight -= 1;
      }
    },
  });

  // 20 events of about 300 KB each: 6 MB, more than one page may carry (4 MB).
  const bigEvents: DeliveryRecordInput[] = Array.from({ length: 20 }, (_, i) => ({
    webhookId: `wh_big_${String(i).padStart(2, '0')}`,
    merchantId: feeder.id,
    event: 'payout',
    references: [`po-big-${i}`],
    firstSeenAt: new Date(Date.now() - (20 - i) * 1000).toISOString(),
    payload: JSON.stringify({ event: 'payout', data: { reference: `po-big-${i}`, note: String(i % 10).repeat(300_000) } }),
    at: new Date(Date.now() - (20 - i) * 1000).toISOString(),
    outcome: 'delivered',
    attemptNumber: 1,
    attempt: { startedAt: new Date().toISOString(), durationMs: 3, httpStatus: 200 },
  }));

  beforeAll(async () => {
    db = await createTestDatabase('delivery_log_limits');
    test = await TestBroker.open();
    broker = new BrokerConnection({ url: brokerUrl(), name: 'delivery-log-limits-test', logger: silentLogger() });
    await broker.open();
    writer = new DeliveryRecorder(broker, silentLogger(), { prefix });
    await writer.start();
    database = openPostgres(db.url);
    recorder = new DeliveryLogRecorder(broker, database, silentLogger(), { prefix, retentionMs: 30 * 86_400_000, retryMs: 200 });
    await recorder.start();
    // Its tables are made once it leads, in the background: asked before, they do not exist yet
    // (met with the test files in parallel on a 2-core machine).
    await waitFor('the recorder leading', () => recorder.state.leading, 30_000);
    api = await startTestApi(
      prefix,
      [alice, heavy, glacial, bystander, eager, feeder],
      { wrapLogQueries: slowFor, logRateLimit: { perMinute: 60, burst: 100 } },
      { DATABASE_URL: db.url, DELIVERY_LOG: 'on' },
    );
    const small = (merchantId: string, webhookId: string): DeliveryRecordInput => ({
      webhookId, merchantId, event: 'payout', references: [`po-${webhookId}`], firstSeenAt: new Date().toISOString(),
      payload: JSON.stringify({ event: 'payout', data: { reference: `po-${webhookId}` } }), at: new Date().toISOString(), outcome: 'delivered',
      attemptNumber: 1, attempt: { startedAt: new Date().toISOString(), durationMs: 3, httpStatus: 200 },
    });
    for (const event of bigEvents) await writer.record(event);
    await Promise.all([small(bystander.id, 'wh_bystander'), small(heavy.id, 'wh_heavy'), small(alice.id, 'wh_alice')].map((r) => writer.record(r)));
    await waitFor('every record stored', async () => (await db.query<{ n: string }>('SELECT count(*) AS n FROM delivery_records'))[0]!.n === '23', 30_000);
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

  it.each([
    ['year 0 as since', '/nucleus/webhooks?since=0000-01-01T00:00:00Z'],
    ['year 0 as until', '/nucleus/webhooks?until=0000-12-31T23:59:59Z'],
    ['a time before year 1 once its offset applies', '/nucleus/webhooks?since=0001-01-01T00:00:00%2B01:00'],
    ['a feed cursor past bigint', '/nucleus/events?after=9999999999999999999'],
    ['a feed cursor one past bigint', '/nucleus/events?after=9223372036854775808'],
    ['a list cursor in year 0', `/nucleus/webhooks?cursor=${cursorOf(['0000-01-01T00:00:00Z', 'wh_x'])}`],
    ['a list cursor past year 9999', `/nucleus/webhooks?cursor=${cursorOf(['+275760-09-13T00:00:00.000Z', 'wh_x'])}`],
    ['a list cursor naming a NUL', `/nucleus/webhooks?cursor=${cursorOf(['2026-01-01T00:00:00Z', 'wh_\u0000'])}`],
    ['a reference with a NUL', '/nucleus/webhooks?reference=po%00x'],
    ['a webhook id with a NUL', '/nucleus/webhooks/wh%00x'],
  ])('answers 400 invalid_parameter, not 503, for a value PostgreSQL cannot hold: %s', async (_what, path) => {
    const answer = await get(alice, path);
    expect({ status: answer.status, retryAfter: answer.headers.get('retry-after') }).toEqual({ status: 400, retryAfter: null });
    expect(answer.body).toMatchObject({ message: expect.any(String), error: { code: 'invalid_parameter', status: 400 }, data: null });
  });

  it('answers 400 for the same values under /admin', async () => {
    for (const path of [
      `/admin/merchants/${alice.id}/webhooks?since=0000-01-01T00:00:00Z`,
      `/admin/merchants/${alice.id}/webhooks?cursor=${cursorOf(['0000-01-01T00:00:00Z', 'wh_x'])}`,
      `/admin/merchants/${alice.id}/events?after=9999999999999999999`,
    ]) {
      const answer = await adminGet(path);
      expect({ path, status: answer.status, body: answer.body }).toMatchObject({ path, status: 400, body: { error: { code: 'invalid_parameter' }, data: null } });
    }
  });

  it('still takes the extremes PostgreSQL can hold', async () => {
    expect((await get(alice, '/nucleus/events?after=9223372036854775807')).body).toMatchObject({ data: { events: [] } });
    const widest = await get(alice, '/nucleus/webhooks?since=0001-01-01T00:00:00Z&until=9999-12-31T23:59:59.999Z');
    expect((widest.body as { data: { webhooks: Array<{ webhookId: string }> } }).data.webhooks.map((w) => w.webhookId)).toEqual(['wh_alice']);
  });

  /** Polls /readyz until `done`, and returns what each poll said of the log. */
  async function readinessUntil(done: () => boolean): Promise<unknown[]> {
    const readiness: unknown[] = [];
    while (!done()) {
      const ready = await call(api, '/readyz', { method: 'GET' });
      readiness.push({ status: ready.status, database: (ready.body as { deliveryLog: { database: string } }).deliveryLog.database });
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    return readiness;
  }

  it('keeps other merchants\' reads fast and /readyz answering while one merchant floods the log with slow queries', async () => {
    // The log's health is checked every 2 s in the background: start from an answer that says up.
    await waitFor('/readyz saying the log is up', async () => ((await call(api, '/readyz', { method: 'GET' })).body as { deliveryLog: { database: string } }).deliveryLog.database === 'up', 10_000, 100);
    let flooding = true;
    const flood = Promise.all(Array.from({ length: 40 }, () => get(heavy, '/nucleus/webhooks?status=failed'))).finally(() => (flooding = false));
    await waitFor('the heavy merchant\'s queries holding connections', () => slowInFlight >= 2);
    const others: Array<{ status: number; ms: number }> = [];
    const readiness = readinessUntil(() => !flooding);
    while (flooding) {
      const started = Date.now();
      const read = await get(bystander, '/nucleus/webhooks');
      others.push({ status: read.status, ms: Date.now() - started });
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    const answers = await flood;
    expect(others.map((o) => o.status)).toEqual(others.map(() => 200));
    // Never queued behind the heavy merchant's reads (1.5 s each): served as soon as asked.
    expect(Math.max(...others.map((o) => o.ms))).toBeLessThan(1_000);
    expect(others.length).toBeGreaterThan(3);
    expect(await readiness).toEqual((await readiness).map(() => ({ status: 200, database: 'up' })));
    // The heavy merchant's own reads: served two at a time, the rest told when to come back.
    const statuses = answers.map((a) => a.status);
    expect(statuses.filter((s) => s === 200).length).toBeGreaterThanOrEqual(2);
    expect(new Set(statuses.filter((s) => s !== 200))).toEqual(new Set([429]));
    for (const refused of answers.filter((a) => a.status === 429)) {
      expect(refused.body).toMatchObject({ error: { code: 'too_many_concurrent_queries', status: 429 }, data: null });
      expect(Number(refused.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    }
  });

  it('checks the log\'s health on a connection of its own, which merchants\' reads cannot take', async () => {
    // However many merchants fill the reads' pool, /readyz's check does not wait behind them.
    expect((await get(bystander, '/nucleus/webhooks')).status).toBe(200);
    const connections = await waitFor('the API\'s connections', async () => {
      const rows = await db.query<{ name: string; n: string }>(
        'SELECT application_name AS name, count(*) AS n FROM pg_stat_activity WHERE datname = $1 AND application_name LIKE $2 GROUP BY 1',
        [db.name, 'webhooks-api%'],
      );
      const byName = Object.fromEntries(rows.map((r) => [r.name, Number(r.n)]));
      return byName['webhooks-api log health'] && byName['webhooks-api log reads'] ? byName : undefined;
    });
    expect(connections['webhooks-api log health']).toBe(1);
  });

  it('answers 503 log_unavailable with Retry-After when a query runs past the statement timeout', async () => {
    const started = Date.now();
    const answer = await get(glacial, '/nucleus/webhooks');
    expect(answer.status).toBe(503);
    expect(answer.body).toMatchObject({ error: { code: 'log_unavailable', status: 503 }, data: null });
    expect(Number(answer.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    expect(Date.now() - started).toBeLessThan(4_000);
  });

  // A minute's reads are 60 here, so the 150 below outrun the refill however slowly a loaded machine
  // answers them (at 600 a minute, 150 reads taking over 5 s were all allowed under CI's load).
  it('answers 429 rate_limited with Retry-After once a merchant has used its log reads', async () => {
    const statuses: number[] = [];
    let refused: Awaited<ReturnType<typeof get>> | undefined;
    for (let i = 0; i < 150 && !refused; i += 1) {
      const answer = await get(eager, i % 2 === 0 ? '/nucleus/webhooks' : '/nucleus/events');
      statuses.push(answer.status);
      if (answer.status === 429) refused = answer;
    }
    expect(refused).toBeDefined();
    expect(statuses.slice(0, 100)).toEqual(Array(100).fill(200));
    expect(refused!.body).toMatchObject({ message: expect.any(String), error: { code: 'rate_limited', status: 429 }, data: null });
    expect(Number(refused!.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    // Another merchant's reads are not counted against it.
    expect((await get(bystander, '/nucleus/events')).status).toBe(200);
  });

  it('stops a feed page at 4 MB of payloads and continues on the next page without a gap', async () => {
    const pages: Array<Array<{ webhookId: string; cursor: string; payload: unknown }>> = [];
    let after = '0';
    for (;;) {
      const answer = await get(feeder, `/nucleus/events?limit=500&after=${after}`);
      expect(answer.status).toBe(200);
      const { events, nextCursor } = (answer.body as { data: { events: Array<{ webhookId: string; cursor: string; payload: unknown }>; nextCursor: string } }).data;
      if (events.length === 0) break;
      pages.push(events);
      expect(nextCursor).toBe(events.at(-1)!.cursor);
      after = nextCursor;
    }
    const bytes = (events: Array<{ payload: unknown }>) => events.reduce((sum, e) => sum + Buffer.byteLength(JSON.stringify(e.payload)), 0);
    expect(pages.length).toBeGreaterThanOrEqual(2);
    for (const page of pages) expect(bytes(page)).toBeLessThanOrEqual(4 * 1024 * 1024);
    expect(pages.flat().map((e) => e.webhookId)).toEqual(bigEvents.map((e) => e.webhookId));
    expect(pages.flat().map((e) => e.payload)).toEqual(bigEvents.map((e) => JSON.parse(e.payload!)));
  });

  it('gives at least one event per feed page however small the byte budget', async () => {
    const log = deliveryLogQueries(database, { feedPageBytes: 1 });
    const seenIds: string[] = [];
    let after: string | undefined;
    for (;;) {
      const page = await log.feed(feeder.id, after, 500);
      if (page.events.length === 0) break;
      expect(page.events).toHaveLength(1);
      seenIds.push(page.events[0]!.webhookId);
      after = page.nextCursor;
    }
    expect(seenIds).toEqual(bigEvents.map((e) => e.webhookId));
  });

  it('matches every answer it gave to the OpenAPI document', () => {
    const statuses = expectDocumented(seen);
    for (const status of ['/nucleus/webhooks 400', '/nucleus/events 400', '/nucleus/webhooks 429', '/nucleus/webhooks 503']) {
      expect(statuses).toContain(status);
    }
  });
});
