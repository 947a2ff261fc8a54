/**
 * The delivery log when a merchant has several endpoints (issue 56): a webhook is one delivery per
 * endpoint, each with its own status and attempts; the list shows deliveries and filters by
 * endpoint, a webhook's detail shows each endpoint's delivery, the feed keeps one entry per event,
 * and the failure index the recorder fills names the endpoint. Records are written with their
 * endpoint through the writer, as the fanning-out dispatcher writes them.
 */
import type { ApiProgram } from '../../apps/api/program.js';
import type { DeliveryRecordInput } from '../../libs/delivery-log/index.js';
import { adminToken, call, expectDocumented, seen, token } from '../support/api.js';
import { dropExpiredPartitions, openPostgres } from '../../libs/delivery-store/index.js';
import { testMerchant, testSecret } from '../support/harness.js';
import { type LogApi, startLogApi } from '../support/log-api.js';
import type { TestDatabase } from '../support/postgres.js';
import { runProgram } from '../support/process.js';
import { waitFor } from '../support/wait.js';

const CLI = 'dist/apps/cli/main.js';
const minutesAgo = (m: number) => new Date(Date.now() - m * 60_000).toISOString();
const DAY_MS = 86_400_000;

type Item = Record<string, unknown>;

describe('the delivery log per endpoint', () => {
  const [A, B] = ['ep_log_a', 'ep_log_b'];
  const merchant = testMerchant('m_fanlog', 'https://fan.example/a');
  // The log keeps what the records say: the directory needs the merchant, not each endpoint.
  merchant.endpoints = [{ id: A, url: 'https://fan.example/a', enabled: true, secret: testSecret() }];
  let log: LogApi;
  let db: TestDatabase;
  let api: ApiProgram;

  const get = async (path: string) =>
    call(api, path, { method: 'GET', headers: { 'x-auth-token': merchant.publicKey, authorization: `Bearer ${await token(merchant.id)}` } });
  const data = <T>(answer: { body: unknown }) => (answer.body as { data: T }).data;
  const keys = (items: Item[]) => items.map((w) => `${String(w.webhookId)}@${String(w.endpointId)}`);

  // One event to both endpoints: A failed once then delivered (its retry's record carries the later
  // time: a host clock ahead), B ran out of attempts. Another event went to B alone; one was
  // recorded before endpoints (no endpointId).
  const payload = JSON.stringify({ event: 'payout', data: { reference: 'po-fan' } });
  const base = { webhookId: 'wh_fan', merchantId: merchant.id, event: 'payout', references: ['po-fan'], payload, firstSeenAt: minutesAgo(10) };
  const records: DeliveryRecordInput[] = [
    { ...base, endpointId: A, at: minutesAgo(2), outcome: 'retrying', attemptNumber: 1, nextAttemptAt: minutesAgo(8), attempt: { startedAt: minutesAgo(9), durationMs: 5, httpStatus: 500, error: 'http_500' } },
    { ...base, endpointId: A, at: minutesAgo(7), outcome: 'delivered', attemptNumber: 2, attempt: { startedAt: minutesAgo(7), durationMs: 4, httpStatus: 200 } },
    { ...base, endpointId: B, at: minutesAgo(6), outcome: 'failed', attemptNumber: 1, reason: 'attempts-exhausted', attempt: { startedAt: minutesAgo(6), durationMs: 2000, error: 'timeout' } },
    { webhookId: 'wh_b_only', merchantId: merchant.id, endpointId: B, event: 'payout', references: ['po-b'], payload: JSON.stringify({ event: 'payout', data: { reference: 'po-b' } }),
      firstSeenAt: minutesAgo(5), at: minutesAgo(5), outcome: 'delivered', attemptNumber: 1, attempt: { startedAt: minutesAgo(5), durationMs: 3, httpStatus: 204 } },
    { webhookId: 'wh_old', merchantId: merchant.id, event: 'payout', references: ['po-old'], payload: JSON.stringify({ event: 'payout', data: { reference: 'po-old' } }),
      firstSeenAt: minutesAgo(20), at: minutesAgo(20), outcome: 'delivered', attemptNumber: 1, attempt: { startedAt: minutesAgo(20), durationMs: 3, httpStatus: 200 } },
  ];

  beforeAll(async () => {
    log = await startLogApi('endpoint-log', [merchant]);
    ({ db, api } = log);
    // In the stream's order the dispatchers would write them in: A's retry, then B's failure and A's delivery.
    for (const record of records) await log.writer.record(record);
    await waitFor('every record stored', async () => (await db.query<{ n: string }>('SELECT count(*) AS n FROM delivery_records'))[0]!.n === String(records.length), 20_000);
  });

  afterAll(async () => {
    await log?.close();
  });

  it("lists a webhook's deliveries one per endpoint, each with its own status, and filters by endpoint", async () => {
    const list = await get('/nucleus/webhooks');
    expect(list.status).toBe(200);
    const { webhooks } = data<{ webhooks: Item[] }>(list);
    expect(keys(webhooks)).toEqual(['wh_b_only@ep_log_b', 'wh_fan@ep_log_b', 'wh_fan@ep_log_a', 'wh_old@null']);
    // A's status follows its attempts (2 after 1), not the later time its retry's record carries.
    expect(webhooks.find((w) => w.webhookId === 'wh_fan' && w.endpointId === A)).toMatchObject({ status: 'delivered', attempts: 2, lastHttpStatus: 200, nextAttemptAt: null });
    expect(webhooks.find((w) => w.webhookId === 'wh_fan' && w.endpointId === B)).toMatchObject({ status: 'failed', attempts: 1, lastError: 'timeout' });
    expect(keys(data<{ webhooks: Item[] }>(await get(`/nucleus/webhooks?endpointId=${A}`)).webhooks)).toEqual(['wh_fan@ep_log_a']);
    expect(keys(data<{ webhooks: Item[] }>(await get(`/nucleus/webhooks?endpointId=${B}&status=failed`)).webhooks)).toEqual(['wh_fan@ep_log_b']);
    expect(keys(data<{ webhooks: Item[] }>(await get('/nucleus/webhooks?reference=po-fan')).webhooks)).toEqual(['wh_fan@ep_log_b', 'wh_fan@ep_log_a']);
  });

  it('pages through the deliveries of one webhook without losing or repeating one', async () => {
    const seenKeys: string[] = [];
    let cursor: string | null = null;
    do {
      const page: { webhooks: Item[]; nextCursor: string | null } = data(await get(`/nucleus/webhooks?limit=1${cursor ? `&cursor=${cursor}` : ''}`));
      seenKeys.push(...keys(page.webhooks));
      cursor = page.nextCursor;
    } while (cursor);
    expect(seenKeys).toEqual(['wh_b_only@ep_log_b', 'wh_fan@ep_log_b', 'wh_fan@ep_log_a', 'wh_old@null']);
  });

  it("shows a webhook with each endpoint's delivery, and every attempt naming its endpoint", async () => {
    const detail = data<Item & { deliveries: Item[]; records: Item[] }>(await get('/nucleus/webhooks/wh_fan'));
    expect(detail).toMatchObject({ webhookId: 'wh_fan', endpointId: null, status: 'failed', attempts: 3 });
    expect(detail.deliveries).toMatchObject([
      { endpointId: A, status: 'delivered', attempts: 2 },
      { endpointId: B, status: 'failed', attempts: 1 },
    ]);
    // Each delivery's records in its own order (A's retry before its delivery, whose host's clock read earlier), as deliveries.
    expect(detail.records.map((r) => [r.endpointId, r.outcome, r.attemptNumber])).toEqual([
      [A, 'retrying', 1],
      [A, 'delivered', 2],
      [B, 'failed', 1],
    ]);
    const old = data<Item & { deliveries: Item[] }>(await get('/nucleus/webhooks/wh_old'));
    expect(old).toMatchObject({ endpointId: null, status: 'delivered', deliveries: [{ endpointId: null, status: 'delivered' }] });
  });

  it('keeps one feed entry per event, however many endpoints it went to', async () => {
    const feed = data<{ events: Item[] }>(await get('/nucleus/events'));
    expect(feed.events.map((e) => [e.webhookId, e.status])).toEqual([
      ['wh_fan', 'failed'],
      ['wh_b_only', 'delivered'],
      ['wh_old', 'delivered'],
    ]);
  });

  it('answers the same under /admin, and the endpoint filter is in the OpenAPI document', async () => {
    const jwt = await adminToken('webhooks:admin', 'ops');
    const answer = await call(api, `/admin/merchants/${merchant.id}/webhooks?endpointId=${B}`, { method: 'GET', headers: { authorization: `Bearer ${jwt}` } });
    expect(keys(data<{ webhooks: Item[] }>(answer).webhooks)).toEqual(['wh_b_only@ep_log_b', 'wh_fan@ep_log_b']);
    expectDocumented(seen);
  });

  it("indexes B's failure, written by the recorder alone, under its endpoint; the CLI filters the log and the failures by endpoint", async () => {
    await waitFor('indexed from the log', async () => (await api.failures.list({ merchantId: merchant.id, limit: 10 })).length === 1, 10_000);
    expect((await api.failures.list({ merchantId: merchant.id, limit: 10 })).map((f) => [f.webhookId, f.endpointId])).toEqual([['wh_fan', B]]);
    const log = await runProgram(CLI, { DATABASE_URL: db.url }, ['log', '--merchant', merchant.id, '--endpoint', A, '--json']);
    expect(log.code).toBe(0);
    expect(keys(JSON.parse(log.stdout) as Item[])).toEqual(['wh_fan@ep_log_a']);
    const timeline = await runProgram(CLI, { DATABASE_URL: db.url }, ['log', '--merchant', merchant.id, '--webhook-id', 'wh_fan', '--endpoint', B]);
    expect(timeline.stdout).toContain(B);
    expect(timeline.stdout).not.toContain(A);
    const failed = await runProgram(CLI, { DATABASE_URL: db.url }, ['failed', 'list', '--merchant', merchant.id, '--endpoint', B, '--json']);
    expect(JSON.parse(failed.stdout)).toMatchObject([{ webhookId: 'wh_fan', endpointId: B }]);
    const none = await runProgram(CLI, { DATABASE_URL: db.url }, ['failed', 'list', '--merchant', merchant.id, '--endpoint', A, '--json']);
    expect([none.code, none.stdout.trim()]).toEqual([3, '[]']);
  });

  it("keeps each endpoint's delivery of a webhook while the webhook has a record within retention: its detail, its list and its place in the feed", async () => {
    // 40 days ago: delivered to A, failed on B; today B's resend failed again.
    const old = minutesAgo(40 * 24 * 60);
    const kept = { webhookId: 'wh_kept', merchantId: merchant.id, event: 'payout', references: ['po-kept'], payload, firstSeenAt: old };
    const story: DeliveryRecordInput[] = [
      { ...kept, endpointId: A, at: old, outcome: 'delivered', attemptNumber: 1, attempt: { startedAt: old, durationMs: 3, httpStatus: 200 } },
      { ...kept, endpointId: B, at: old, outcome: 'failed', attemptNumber: 1, reason: 'attempts-exhausted', attempt: { startedAt: old, durationMs: 3, httpStatus: 500, error: 'http_500' } },
      { ...kept, endpointId: B, at: minutesAgo(1), outcome: 'failed', attemptNumber: 1, resend: 1, reason: 'attempts-exhausted', attempt: { startedAt: minutesAgo(1), durationMs: 3, httpStatus: 500, error: 'http_500' } },
    ];
    for (const record of story) await log.writer.record(record);
    await waitFor('its records stored', async () => (await db.query<{ n: string }>("SELECT count(*) AS n FROM delivery_records WHERE webhook_id = 'wh_kept'"))[0]!.n === '3', 20_000);
    const before = data<{ events: Item[] }>(await get('/nucleus/events?limit=500')).events;
    const cursor = String(before.find((e) => e.webhookId === 'wh_kept')!.cursor);
    const feedAfter = async () => data<{ events: Item[] }>(await get(`/nucleus/events?after=${cursor}&limit=500`)).events.map((e) => e.webhookId);
    expect(await feedAfter()).not.toContain('wh_kept');

    const database = openPostgres(db.url);
    try {
      await dropExpiredPartitions(database, 30 * DAY_MS);
    } finally {
      await database.close();
    }
    // The webhook's last record is today: every delivery of it stays (the records of 40 days ago are gone with their day).
    const detail = data<Item & { deliveries: Item[] }>(await get('/nucleus/webhooks/wh_kept'));
    expect(detail.deliveries.map((d) => [d.endpointId, d.status])).toEqual([[A, 'delivered'], [B, 'failed']]);
    expect(keys(data<{ webhooks: Item[] }>(await get('/nucleus/webhooks?reference=po-kept')).webhooks)).toEqual(['wh_kept@ep_log_b', 'wh_kept@ep_log_a']);
    // A reader past it does not get it again.
    expect(await feedAfter()).not.toContain('wh_kept');
  });
});
