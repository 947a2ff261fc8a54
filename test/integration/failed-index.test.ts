import { randomUUID } from 'node:crypto';
import pg_ from 'pg';
import { loadDispatcherConfig } from '../../apps/dispatcher/config.js';
import { type DispatcherProgram, startDispatcher } from '../../apps/dispatcher/program.js';
import { loadRecorderConfig } from '../../apps/recorder/config.js';
import { type RecorderProgram, startRecorder } from '../../apps/recorder/program.js';
import type { ApiProgram } from '../../apps/api/program.js';
import { HEADERS, sampleEvent } from '../../libs/contracts/index.js';
import { openPostgres } from '../../libs/delivery-store/index.js';
import { FailedStore } from '../../libs/failed/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import type { Merchant } from '../../libs/merchants/index.js';
import { EventPublisher } from '../../libs/publisher/index.js';
import { call, startTestApi, token, unresolved } from '../support/api.js';
import { TestBroker, brokerUrl, uniquePrefix } from '../support/broker.js';
import { startHarness, testMerchant } from '../support/harness.js';
import { seedMerchants, TEST_SECRETS_KEY } from '../support/merchant-rows.js';
import { PrivatePostgres } from '../support/private-postgres.js';
import { Receiver } from '../support/receiver.js';
import { capturingLogger } from '../support/capturing-logger.js';
import { waitFor } from '../support/wait.js';

const RESEND = '/nucleus/tnx/webhook';
const auth = async (merchant: Merchant) => ({ 'x-auth-token': merchant.publicKey, authorization: `Bearer ${await token(merchant.id)}` });

/**
 * The failure index is PostgreSQL (failed_webhooks): written by the dispatcher once a webhook is in
 * `failed`, and by the recorder from the delivery log when the dispatcher could not reach it.
 */
describe('the failure index in PostgreSQL', () => {
  it('makes a failure resendable without any recorder (the log as far behind as can be): the dispatcher wrote it', async () => {
    let mode: 'fail' | 'ok' = 'fail';
    const receiver = await Receiver.start(() => (mode === 'fail' ? 500 : 200));
    const merchant = testMerchant('m_index_fast', receiver.url);
    // Records go to the deliveries stream and nothing stores them.
    const harness = await startHarness({ name: 'index-fast', merchants: [merchant], deliveryLog: true });
    const api = await startTestApi(harness.prefix);
    try {
      const message = sampleEvent('payout', merchant.id);
      const { messageId } = await harness.publisher.publish(message);
      await waitFor('failed', () => harness.dispatcher.stats.failed === 1);
      await waitFor('indexed', async () => (await unresolved(api, merchant.id, String(message.data.reference))) === 1);
      expect(await harness.database.query('SELECT count(*)::int AS n FROM delivery_webhooks')).toEqual([{ n: 0 }]);
      mode = 'ok';
      expect((await call(api, `${RESEND}?reference=${message.data.reference}`, { headers: await auth(merchant) })).status).toBe(200);
      await waitFor('resent', () => receiver.requests.filter((r) => r.headers['webhook-id'] === messageId).length === 2);
    } finally {
      await api.stop();
      await harness.close();
      await receiver.close();
    }
  });

  it('frees a webhook that fails again after its resend, and a stale copy of the first resend cannot mark the new failure resent', async () => {
    let status = 500;
    const receiver = await Receiver.start(() => status);
    const merchant = testMerchant('m_index_again', receiver.url);
    const harness = await startHarness({ name: 'index-again', merchants: [merchant] });
    const api = await startTestApi(harness.prefix);
    try {
      const message = sampleEvent('payout', merchant.id);
      const reference = String(message.data.reference);
      const { messageId } = await harness.publisher.publish(message);
      await waitFor('indexed', async () => (await unresolved(api, merchant.id, reference)) === 1);
      expect((await call(api, `${RESEND}?reference=${reference}`, { headers: await auth(merchant) })).status).toBe(200);
      const [first] = await harness.database.query<{ claim_id: string }>('SELECT claim_id FROM failed_webhooks WHERE webhook_id = $1', [messageId]);
      // The resent copy fails again: a new failure, free for the next resend.
      await waitFor('failed again', () => harness.dispatcher.stats.failed === 2);
      await waitFor('indexed again', async () => (await unresolved(api, merchant.id, reference)) === 1);
      // A copy of the first resend arrives late (delivered, this time): its claim is not this failure's.
      status = 200;
      await harness.test.publishRaw(harness.names.dispatch, Buffer.from(JSON.stringify(message)), {
        messageId,
        contentType: 'application/json',
        headers: { [HEADERS.resentAt]: new Date().toISOString(), [HEADERS.claimId]: first!.claim_id, [HEADERS.merchantId]: merchant.id },
      });
      await waitFor('the stale copy delivered', () => harness.dispatcher.stats.delivered === 1);
      await new Promise((resolve) => setImmediate(resolve));
      await waitFor('its mark settled', async () => (await harness.database.query<{ n: number }>("SELECT count(*)::int AS n FROM pg_stat_activity WHERE query LIKE 'UPDATE failed_webhooks SET resent_at%' AND state = 'active'"))[0]!.n === 0);
      expect(await unresolved(api, merchant.id, reference)).toBe(1);
      expect((await call(api, `${RESEND}?reference=${reference}`, { headers: await auth(merchant) })).status).toBe(200);
    } finally {
      await api.stop();
      await harness.close();
      await receiver.close();
    }
  });

  it("numbers a resend past the copy whose failure made the row, after retention deleted the row it replaced: the next failure frees it again", async () => {
    const merchant = testMerchant('m_index_reborn', 'http://127.0.0.1:1/');
    const harness = await startHarness({ name: 'index-reborn', merchants: [merchant] });
    const db = openPostgres(harness.database.url);
    try {
      const store = new FailedStore(db);
      const message = sampleEvent('payout', merchant.id);
      const failure = (resend: number, failedAt: Date) => ({
        merchantId: merchant.id, webhookId: 'evt_reborn', failedAt, event: 'payout', references: [String(message.data.reference)], reason: 'attempts-exhausted',
        attempts: 1, content: JSON.stringify(message), headers: {}, endpointId: merchant.endpoints[0]!.id, resend,
      });
      const filter = { webhookId: 'evt_reborn' };
      // The second resend's copy fails after retention deleted the row it was claimed from: a new row.
      await store.record(failure(2, new Date(Date.now() - 60_000)));
      const claimId = randomUUID();
      const [claimed] = await store.claim(merchant.id, filter, claimId);
      // Its copy is the third resend (numbered 1, its failure ranked below the one that made the row).
      expect(claimed?.resend).toBe(3);
      await store.markResent(merchant.id, ['evt_reborn'], claimId);
      // That copy fails too: the row is free for the next resend (it stayed resent: every resend 404).
      await store.record(failure(claimed!.resend, new Date()));
      expect(await store.claim(merchant.id, filter, randomUUID())).toHaveLength(1);
    } finally {
      await db.close();
      await harness.close();
    }
  });

  it('frees a webhook whose resent copy fails again on a dispatcher whose clock is behind the first failure\'s', async () => {
    const receiver = await Receiver.start(() => 500);
    const merchant = testMerchant('m_index_skew', receiver.url);
    let behindMs = 0;
    const harness = await startHarness({ name: 'index-skew', merchants: [merchant], now: () => new Date(Date.now() - behindMs) });
    const api = await startTestApi(harness.prefix);
    try {
      const message = sampleEvent('payout', merchant.id);
      const reference = String(message.data.reference);
      await harness.publisher.publish(message);
      await waitFor('indexed', async () => (await unresolved(api, merchant.id, reference)) === 1);
      // The resent copy is taken by a dispatcher whose clock runs 10 minutes behind the first one's.
      behindMs = 10 * 60_000;
      expect((await call(api, `${RESEND}?reference=${reference}`, { headers: await auth(merchant) })).status).toBe(200);
      await waitFor('failed again', () => harness.dispatcher.stats.failed === 2);
      // Its failure is the later one (the first resend's), whatever its failed_at: free for the next resend.
      await waitFor('indexed again', async () => (await unresolved(api, merchant.id, reference)) === 1);
      expect((await call(api, `${RESEND}?reference=${reference}`, { headers: await auth(merchant) })).status).toBe(200);
    } finally {
      await api.stop();
      await harness.close();
      await receiver.close();
    }
  });
});

const describeWithPrivatePostgres = process.env.SKIP_PRIVATE_POSTGRES ? describe.skip : describe;

describeWithPrivatePostgres('the failure index while PostgreSQL is down', () => {
  let pg: PrivatePostgres | undefined;
  let receiver: Receiver;
  let mode: 'fail' | 'ok' = 'fail';
  const prefix = uniquePrefix('index-outage');
  const merchant = testMerchant('m_index_outage', 'http://127.0.0.1:1/');
  let dispatcher: DispatcherProgram | undefined;
  let recorder: RecorderProgram | undefined;
  let api: ApiProgram | undefined;
  let test: TestBroker;

  beforeAll(async () => {
    pg = await PrivatePostgres.start();
    receiver = await Receiver.start(() => (mode === 'fail' ? 500 : 200));
    merchant.endpoints[0]!.url = receiver.url;
    test = await TestBroker.open();
  }, 120_000);

  afterAll(async () => {
    await api?.stop();
    await dispatcher?.stop();
    await recorder?.stop();
    await pg?.stop();
    await receiver?.close();
    await test.deleteTopology(prefix);
    await test.close();
  });

  it('lands failures in failed meanwhile, answers resends 503 with Retry-After, and indexes them from the log once it is back', async () => {
    if (!pg) return;
    await seedMerchants(pg.url, [merchant]);
    const common = { RABBITMQ_URL: brokerUrl(), TOPOLOGY_PREFIX: prefix, DATABASE_URL: pg.url, RETRY_SCHEDULE: '', FAILED_RETENTION: '1D' };
    recorder = await startRecorder(loadRecorderConfig(common), silentLogger());
    const lines: Array<Record<string, unknown>> = [];
    dispatcher = await startDispatcher(loadDispatcherConfig({ ...common, SECRETS_KEY: TEST_SECRETS_KEY, ALLOW_PRIVATE_TARGETS: 'true', METRICS_PORT: '0' }), capturingLogger(lines));
    api = await startTestApi(prefix, [], {}, { DATABASE_URL: pg.url });
    const publisher = new EventPublisher(dispatcher.broker, prefix);

    await pg.crash();
    const message = sampleEvent('charge.completed', merchant.id);
    const reference = String(message.data.tnxRef);
    const { messageId } = await publisher.publish(message);
    // The operators' copy is there whatever PostgreSQL does.
    const [entry] = await test.readStream(`${prefix}.failed`, 1, 20_000);
    expect(entry!.properties.messageId).toBe(messageId);
    const refused = await call(api, `${RESEND}?reference=${reference}`, { headers: await auth(merchant) });
    expect(refused.status).toBe(503);
    expect(refused.headers.get('retry-after')).toBe('5');
    expect(refused.body).toMatchObject({ error: { code: 'service_unavailable' }, data: null });

    // The dispatcher's own write (after the ack) is lost with the outage only if it is tried before
    // the server is back: tried after, it lands, and the row is not the log's.
    await waitFor("the dispatcher's write lost", () => lines.some((line) => line.message === 'failure not indexed; the recorder indexes it from the delivery log' && line.webhookId === messageId), 20_000);
    await pg.up();
    // The recorder indexes it from the log.
    await waitFor('indexed from the log', async () => (await unresolved(api!, merchant.id, reference).catch(() => 0)) === 1, 60_000, 250);
    const probe = new pg_.Client({ connectionString: pg.url });
    await probe.connect();
    try {
      expect((await probe.query('SELECT content IS NULL AS from_log FROM failed_webhooks WHERE webhook_id = $1', [messageId])).rows).toEqual([{ from_log: true }]);
    } finally {
      await probe.end();
    }
    mode = 'ok';
    await waitFor('resent', async () => (await call(api!, `${RESEND}?reference=${reference}`, { headers: await auth(merchant) })).status === 200, 20_000, 500);
    await waitFor('delivered', () => receiver.requests.filter((r) => r.headers['webhook-id'] === messageId).length === 2, 20_000);
    const [, resent] = receiver.requests.filter((r) => r.headers['webhook-id'] === messageId);
    // The log's copy: the same event and data (PostgreSQL's key order).
    expect(JSON.parse(resent!.body)).toEqual({ event: 'charge.completed', data: message.data });
  }, 180_000);
});
