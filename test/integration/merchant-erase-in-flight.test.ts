import { randomUUID } from 'node:crypto';
import { loadRecorderConfig } from '../../apps/recorder/config.js';
import { type RecorderProgram, startRecorder } from '../../apps/recorder/program.js';
import type { DispatcherProgram } from '../../apps/dispatcher/program.js';
import { BrokerConnection } from '../../libs/broker/index.js';
import { HEADERS, sampleEvent } from '../../libs/contracts/index.js';
import { type Database, openPostgres } from '../../libs/delivery-store/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { MERCHANT_TABLES, MerchantSettings, PgMerchantDirectory, SecretBox } from '../../libs/merchants/index.js';
import { EventPublisher } from '../../libs/publisher/index.js';
import { FailedStore } from '../../libs/failed/index.js';
import { WaitStore } from '../../libs/waits/index.js';
import { topologyNames } from '../../libs/topology/index.js';
import { TestBroker, brokerUrl, uniquePrefix } from '../support/broker.js';
import { runCliInProcess } from '../support/cli.js';
import { startDatabaseDispatcher, TEST_SECRETS_KEY } from '../support/dispatcher-program.js';
import { putWithEndpoint } from '../support/merchant-endpoints.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';
import { Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

/**
 * A merchant deleted (`webhooks merchants delete`, docs/production.md "Deleting a merchant's data")
 * stays deleted: what of it was still in RabbitMQ when it was deleted (a backlog of first attempts in
 * dispatch, a resent copy, a wait handed back just before, the records of its attempts in the
 * deliveries stream the recorder had not stored yet) writes none of its rows back into PostgreSQL,
 * and its server receives nothing more.
 */
describe('a merchant deleted with work in flight', () => {
  const prefix = uniquePrefix('erase-in-flight');
  const names = topologyNames(prefix);
  const GONE = 'm_erased';
  let db: TestDatabase;
  let database: Database;
  let directory: PgMerchantDirectory;
  let receiver: Receiver;
  let test: TestBroker;
  let upstream: BrokerConnection;
  let publisher: EventPublisher;
  const programs: Array<DispatcherProgram | RecorderProgram> = [];
  /** The merchant's server answers 500 until it hangs every request; the merchant made again, it answers. */
  let hang = false;
  let answers = false;
  const env = { RETRY_SCHEDULE: '1h', WAIT_LEASE: '5s', DELIVERY_TIMEOUT_MS: '2000' };

  beforeAll(async () => {
    db = await createTestDatabase('erase_in_flight');
    database = openPostgres(db.url);
    directory = new PgMerchantDirectory(database, new SecretBox(Buffer.from(TEST_SECRETS_KEY, 'base64')), silentLogger());
    await directory.start();
    receiver = await Receiver.start(() => (answers ? 200 : hang ? 'hang' : 500));
    await putWithEndpoint(new MerchantSettings(directory, { allowHttp: true, allowPrivateTargets: true }), GONE, { publicKey: 'pk_erased_00001', url: receiver.url });
    test = await TestBroker.open();
    upstream = new BrokerConnection({ url: brokerUrl(), name: 'test-erase-upstream', logger: silentLogger() });
    await upstream.open(10_000);
    publisher = new EventPublisher(upstream, prefix);
  }, 60_000);

  afterAll(async () => {
    for (const program of programs.reverse()) await program.stop();
    await upstream?.close();
    await directory?.close();
    await database?.close();
    await test?.deleteTopology(prefix);
    await test?.close();
    await receiver?.close();
    await db?.drop();
  });

  const rowsLeft = async (merchantId = GONE) => {
    const left: Record<string, number> = {};
    for (const { table, where } of MERCHANT_TABLES) {
      const [row] = await db.query<{ n: number }>(`SELECT count(*)::integer AS n FROM ${table} WHERE ${where}`, [merchantId]);
      if (row!.n > 0) left[table] = row!.n;
    }
    return left;
  };
  /** A copy as the resend API publishes it: the failed message with the resend's marks. */
  const resentCopy = async (webhookId: string, body: object) =>
    test.publishRaw(names.dispatch, Buffer.from(JSON.stringify(body)), {
      messageId: webhookId,
      contentType: 'application/json',
      headers: { [HEADERS.resentAt]: new Date().toISOString(), [HEADERS.resend]: 1, [HEADERS.claimId]: randomUUID(), [HEADERS.merchantId]: GONE },
    });

  it('writes none of its rows back and sends it nothing: a backlog, a resent copy, a hand-back, an attempt out at the delete, the log behind', async () => {
    // Before the delete: an attempt that failed (its wait a row, its record in the deliveries stream,
    // which no recorder has stored yet); every later request hangs, an attempt out at the delete.
    const running = await startDatabaseDispatcher(prefix, db.url, { ...env, DISPATCH_CONCURRENCY: '1' });
    programs.push(running);
    await waitFor('the dispatcher knows the merchant', () => running.merchants.byId(GONE) !== undefined, 15_000);
    const failing = sampleEvent('payout', GONE);
    const { messageId: failingId } = await publisher.publish(failing);
    await waitFor('its wait written', async () => (await db.query('SELECT 1 FROM webhook_waits WHERE merchant_id = $1', [GONE])).length === 1, 15_000);
    hang = true;

    // In dispatch: a backlog of first attempts (the first of them out, hanging), a resent copy, and
    // the failed webhook's wait handed back just before the delete.
    const backlog = ['payout', 'charge.completed', 'refund.completed', 'payout', 'payout'] as const;
    for (const event of backlog) await publisher.publish(sampleEvent(event, GONE));
    await resentCopy(`evt_resent_${randomUUID()}`, sampleEvent('payout', GONE));
    await test.publishRaw(names.dispatch, Buffer.from(JSON.stringify(failing)), {
      messageId: failingId,
      contentType: 'application/json',
      headers: { [HEADERS.waitHand]: 1, [HEADERS.merchantId]: GONE, [HEADERS.attempts]: 1, [HEADERS.webhookId]: failingId, [HEADERS.firstSeenAt]: new Date().toISOString() },
    });
    await waitFor('an attempt out', () => receiver.requests.length === 2, 15_000);

    const deleted = await runCliInProcess({ DATABASE_URL: db.url, SECRETS_KEY: TEST_SECRETS_KEY }, ['merchants', 'delete', GONE, '--yes']);
    expect(deleted.code).toBe(0);
    const deletedAt = Date.now();
    // A dispatcher started after the delete takes the backlog with the one running through it.
    const started = await startDatabaseDispatcher(prefix, db.url, env);
    programs.push(started);
    await waitFor('the running dispatcher heard of the delete', () => running.merchants.byId(GONE) === undefined, 15_000);
    const idle = async () => (await test.messageCount(names.dispatch)) === 0 && running.dispatcher.unacked === 0 && started.dispatcher.unacked === 0;
    await waitFor('the backlog taken', idle, 30_000);
    // Published after the delete: new events and another resent copy.
    const settled = () => [running, started].reduce((n, p) => n + Object.values(p.dispatcher.stats).reduce((a, b) => a + b, 0), 0);
    const before = settled();
    await publisher.publish(sampleEvent('payout', GONE));
    await resentCopy(`evt_resent_${randomUUID()}`, sampleEvent('refund.completed', GONE));
    await waitFor('the later ones taken', async () => settled() >= before + 2 && (await idle()), 30_000);

    // The recorder, behind, reads what the deliveries stream held of the attempt before the delete.
    const recorder = await startRecorder(loadRecorderConfig({ RABBITMQ_URL: brokerUrl(), TOPOLOGY_PREFIX: prefix, DATABASE_URL: db.url, FAILED_RETENTION: '1D' }), silentLogger());
    programs.push(recorder);
    // The failed attempt's record is the stream's first: stored (or dropped) once the recorder holds nothing more.
    await waitFor('the recorder caught up', () => recorder.recorder.state.recordsStored >= 1 && recorder.recorder.state.pending === 0, 30_000);

    expect(await rowsLeft()).toEqual({});
    expect(receiver.requests.filter((r) => r.at >= deletedAt)).toEqual([]);
    // Nothing of it parked with its payload either: dropped.
    expect(await test.messageCount(names.invalid)).toBe(0);

    // Made again with the same id: a new merchant, delivered to and logged as any other.
    answers = true;
    await putWithEndpoint(new MerchantSettings(directory, { allowHttp: true, allowPrivateTargets: true }), GONE, { publicKey: 'pk_erased_00002', url: receiver.url });
    await waitFor('both dispatchers know it again', () => running.merchants.byId(GONE)?.endpoints.length === 1 && started.merchants.byId(GONE)?.endpoints.length === 1, 15_000);
    const { messageId: again } = await publisher.publish(sampleEvent('payout', GONE));
    await waitFor('its webhook logged', async () => (await db.query("SELECT 1 FROM delivery_webhooks WHERE merchant_id = $1 AND webhook_id = $2 AND status = 'delivered'", [GONE, again])).length === 1, 30_000);
    expect(receiver.requests.filter((r) => r.headers['webhook-id'] === again)).toHaveLength(1);
  }, 120_000);

  it('leaves out the failure and the wait a dispatcher that has not heard of the delete yet writes, in the same statement', async () => {
    const LATE = 'm_erased_late';
    await putWithEndpoint(new MerchantSettings(directory, { allowHttp: true, allowPrivateTargets: true }), LATE, { publicKey: 'pk_erased_late1', url: receiver.url });
    const deleted = await runCliInProcess({ DATABASE_URL: db.url, SECRETS_KEY: TEST_SECRETS_KEY }, ['merchants', 'delete', LATE, '--yes']);
    expect(deleted.code).toBe(0);
    // What its cache, still holding the merchant, lets a dispatcher write: a resent copy's failure, an attempt's wait.
    const failure = { merchantId: LATE, webhookId: 'evt_late_1', failedAt: new Date(), event: 'payout', references: ['PO-LATE-1'], reason: 'attempts-exhausted', attempts: 1, content: '{"amount":1}', headers: {} };
    await new FailedStore(database).record(failure);
    const wait = { merchantId: LATE, webhookId: 'evt_late_2', endpointId: 'ep_late', hand: 0, attempt: 1, delayMs: 60_000, reason: 'retry' as const, headers: {}, content: Buffer.from('{"amount":2}'), spanLeftMs: 3_600_000 };
    await new WaitStore(database).write([wait], []);
    const left: Record<string, number> = {};
    for (const { table, where } of MERCHANT_TABLES) {
      const [row] = await db.query<{ n: number }>(`SELECT count(*)::integer AS n FROM ${table} WHERE ${where}`, [LATE]);
      if (row!.n > 0) left[table] = row!.n;
    }
    expect(left).toEqual({});
    // A merchant that exists (the one made again above) still has both written.
    await new FailedStore(database).record({ ...failure, merchantId: GONE });
    await new WaitStore(database).write([{ ...wait, merchantId: GONE }], []);
    expect((await db.query('SELECT 1 FROM failed_webhooks WHERE merchant_id = $1', [GONE])).length).toBe(1);
    expect((await db.query('SELECT 1 FROM webhook_waits w JOIN webhook_bodies b USING (merchant_id, webhook_id, endpoint_id) WHERE w.merchant_id = $1', [GONE])).length).toBe(1);
  });

  it('writes nothing back for an ordered merchant: its head out at the delete, the webhooks behind it, one of the same reference after', async () => {
    const ORDERED = 'm_erased_ordered';
    hang = true;
    answers = false;
    await putWithEndpoint(new MerchantSettings(directory, { allowHttp: true, allowPrivateTargets: true }), ORDERED, { publicKey: 'pk_erased_ord01', url: receiver.url, orderByReference: true });
    const dispatcher = await startDatabaseDispatcher(prefix, db.url, env);
    programs.push(dispatcher);
    // Every dispatcher of the file takes from dispatch, the earlier cases' too: each must hold the
    // merchant with its endpoint (two commits, each heard by its notification) before the first
    // payout, or one that has heard of the merchant alone skips it, or of neither parks it.
    await waitFor('every dispatcher knows the merchant and its endpoint', () => programs.every((p) => !('merchants' in p) || p.merchants.byId(ORDERED)?.endpoints.length === 1), 15_000);
    const payout = (n: number) => {
      const event = sampleEvent('payout', ORDERED);
      event.data = { ...event.data, reference: 'PO-ERASED-1', amount: n };
      return event;
    };
    const sentBefore = receiver.requests.length;
    for (let n = 1; n <= 3; n++) await publisher.publish(payout(n));
    // The head's request hangs; the two behind it wait for it.
    await waitFor('the head out, two behind it', async () => receiver.requests.length === sentBefore + 1 && (await db.query('SELECT 1 FROM webhook_order WHERE merchant_id = $1', [ORDERED])).length === 3, 15_000);

    // Every dispatcher of the file takes from dispatch: the earlier cases' too.
    const dispatchers = programs.filter((p): p is DispatcherProgram => 'dispatcher' in p).map((p) => p.dispatcher);
    const settled = () => dispatchers.reduce((n, d) => n + Object.values(d.stats).reduce((a, b) => a + b, 0), 0);
    const settledBefore = settled();
    const deleted = await runCliInProcess({ DATABASE_URL: db.url, SECRETS_KEY: TEST_SECRETS_KEY }, ['merchants', 'delete', ORDERED, '--yes']);
    expect(deleted.code).toBe(0);
    const deletedAt = Date.now();
    await waitFor('the dispatchers heard of the delete', () => programs.every((p) => !('merchants' in p) || p.merchants.byId(ORDERED) === undefined), 15_000);
    await publisher.publish(payout(4));
    // The head's attempt times out (DELIVERY_TIMEOUT_MS) and the one after the delete is taken.
    await waitFor('both settled', async () => settled() >= settledBefore + 2 && dispatchers.every((d) => d.unacked === 0) && (await test.messageCount(names.dispatch)) === 0, 30_000);

    expect(await rowsLeft(ORDERED)).toEqual({});
    expect(receiver.requests.slice(sentBefore).filter((r) => r.at >= deletedAt)).toEqual([]);
    expect(await test.messageCount(names.invalid)).toBe(0);
  }, 60_000);
});
