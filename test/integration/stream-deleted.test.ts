import { BrokerConnection, BrokerUnavailableError } from '../../libs/broker/index.js';
import { sampleEvent } from '../../libs/contracts/index.js';
import { decodeRecords, type DeliveryRecordInput, DeliveryRecorder } from '../../libs/delivery-log/index.js';
import { deliveryLogQueries, DeliveryLogRecorder, openPostgres } from '../../libs/delivery-store/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { declareQueueSpec, deliveriesSpec, topologyNames } from '../../libs/topology/index.js';
import { call, startTestApi, token, unresolved } from '../support/api.js';
import { TestBroker, brokerUrl, uniquePrefix } from '../support/broker.js';
import { startHarness, testMerchant } from '../support/harness.js';
import { Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';
import { loadRecorderConfig } from '../../apps/recorder/config.js';
import { startRecorder } from '../../apps/recorder/program.js';
import { createTestDatabase } from '../support/postgres.js';

/**
 * An operator deletes a stream (streams cannot be purged). The next connect declares it again,
 * empty, with offsets starting over: every tail must read the new one from its first entry.
 */
describe('a deleted stream is declared again and read from its start, without a restart', () => {
  let test: TestBroker;

  beforeAll(async () => {
    test = await TestBroker.open();
  });

  afterAll(async () => {
    await test.close();
  });

  it('failed: failures indexed before the stream was deleted stay resendable, and a new failure lands in the stream declared again', async () => {
    let mode: 'fail' | 'ok' = 'fail';
    const receiver = await Receiver.start(() => (mode === 'fail' ? 500 : 200));
    const merchant = testMerchant('m_deleted_failed', receiver.url);
    const harness = await startHarness({ name: 'deleted-failed', merchants: [merchant], retryDelaysMs: [] });
    const api = await startTestApi(harness.prefix);
    try {
      const first = sampleEvent('payout', merchant.id);
      const oldReference = String(first.data.reference);
      const before = await harness.publisher.publish(first);
      await waitFor('failure indexed', async () => (await unresolved(api, merchant.id, oldReference)) === 1, 15_000);

      await test.channel.deleteQueue(harness.names.failed);
      const message = sampleEvent('payout', merchant.id);
      const reference = String(message.data.reference);
      const { messageId } = await harness.publisher.publish(message);
      await waitFor('new failure indexed', async () => (await unresolved(api, merchant.id, reference)) === 1, 15_000);
      // The operators' copy: in the failed stream declared again.
      expect((await harness.test.readStream(harness.names.failed, 1, 10_000)).map((e) => e.properties.messageId)).toEqual([messageId]);
      mode = 'ok';
      const headers = { 'x-auth-token': merchant.publicKey, authorization: `Bearer ${await token(merchant.id)}` };
      for (const ref of [oldReference, reference]) expect((await call(api, `/nucleus/tnx/webhook?reference=${ref}`, { headers })).status).toBe(200);
      for (const id of [before.messageId, messageId]) {
        await waitFor('resent webhook delivered', () => receiver.requests.filter((r) => r.headers['webhook-id'] === id).length === 2, 10_000);
      }
    } finally {
      await api.stop();
      await harness.close();
      await receiver.close();
    }
  }, 90_000);

  it('deliveries: the record writer declares the stream again, and the recorder stores the new stream from its start', async () => {
    const prefix = uniquePrefix('deleted-deliveries');
    const { deliveries } = topologyNames(prefix);
    const broker = new BrokerConnection({ url: brokerUrl(), name: 'test-deleted-deliveries', logger: silentLogger() });
    await broker.open(10_000);
    // The recorder on a connection of its own, as in its own program: the broker cancels its consumer.
    const recorderBroker = new BrokerConnection({ url: brokerUrl(), name: 'test-deleted-deliveries-recorder', logger: silentLogger() });
    await recorderBroker.open(10_000);
    const db = await createTestDatabase('deleted_deliveries');
    const database = openPostgres(db.url);
    const writer = new DeliveryRecorder(broker, silentLogger(), { prefix, maxRecords: 1 });
    const recorder = new DeliveryLogRecorder(recorderBroker, database, silentLogger(), { prefix, retentionMs: 86_400_000, retryMs: 200 });
    const record = (webhookId: string): DeliveryRecordInput => ({
      webhookId,
      merchantId: 'm_1',
      event: 'payout',
      references: [`po-${webhookId}`],
      firstSeenAt: new Date().toISOString(),
      outcome: 'delivered',
      attemptNumber: 1,
    });
    // The recorder makes the schema once it leads; before that, nothing is stored.
    const stored = async () =>
      (await db.query<{ webhook_id: string }>('SELECT webhook_id FROM delivery_webhooks ORDER BY webhook_id').catch(() => [])).map((r) => r.webhook_id);
    try {
      await writer.start();
      await recorder.start();
      // One record per stream message: the stored offset ends well past the new stream's end.
      for (let i = 0; i < 5; i++) await writer.record(record(`wh_before_${i}`));
      await waitFor('the records before stored', async () => (await stored()).length === 5, 15_000);

      await test.channel.deleteQueue(deliveries);
      await writer.record(record('wh_after'));
      const [entry] = await test.readStream(deliveries, 1);
      expect(decodeRecords(entry!.content).records.map((r) => r.webhookId)).toEqual(['wh_after']);
      await waitFor('the record written to the new stream stored', async () => (await stored()).includes('wh_after'), 20_000);
      await writer.record(record('wh_later'));
      await waitFor('and the next one', async () => (await stored()).includes('wh_later'), 10_000);
      expect(await stored()).toEqual([...Array.from({ length: 5 }, (_, i) => `wh_before_${i}`), 'wh_after', 'wh_later'].sort());
    } finally {
      await writer.stop();
      await recorder.stop();
      await database.close();
      await broker.close();
      await recorderBroker.close();
      await test.channel.deleteQueue(deliveries).catch(() => {});
      await db.drop();
    }
  }, 60_000);

  it('deliveries: a recorder away while the stream was deleted and written past its old end stores the new stream from its start, at cursors past the old ones', async () => {
    const prefix = uniquePrefix('deleted-deliveries-past');
    const { deliveries } = topologyNames(prefix);
    const broker = new BrokerConnection({ url: brokerUrl(), name: 'test-deleted-deliveries-past', logger: silentLogger() });
    await broker.open(10_000);
    const db = await createTestDatabase('deleted_deliveries_past');
    const database = openPostgres(db.url);
    const writer = new DeliveryRecorder(broker, silentLogger(), { prefix, maxRecords: 1 });
    const newRecorder = () => new DeliveryLogRecorder(broker, database, silentLogger(), { prefix, retentionMs: 86_400_000, retryMs: 200 });
    const record = (webhookId: string): DeliveryRecordInput => ({ webhookId, merchantId: 'm_1', event: 'payout', references: [`po-${webhookId}`], firstSeenAt: new Date().toISOString(), outcome: 'delivered', attemptNumber: 1 });
    const stored = async () => (await db.query<{ webhook_id: string }>('SELECT webhook_id FROM delivery_webhooks ORDER BY webhook_id').catch(() => [])).map((r) => r.webhook_id);
    const log = deliveryLogQueries(database);
    let recorder = newRecorder();
    try {
      await writer.start();
      await recorder.start();
      for (let i = 0; i < 5; i++) await writer.record(record(`wh_before_${i}`));
      await waitFor('the records before stored', async () => (await stored()).length === 5, 15_000);
      const before = await log.feed('m_1', undefined, 100);
      await recorder.stop();

      // While no recorder runs: deleted, declared again by the writer, and written past the old end.
      await test.channel.deleteQueue(deliveries);
      const after = Array.from({ length: 12 }, (_, i) => `wh_after_${String(i).padStart(2, '0')}`);
      for (const id of after) await writer.record(record(id));
      recorder = newRecorder();
      await recorder.start();
      await waitFor('every record of the new stream stored', async () => (await stored()).length === 17, 20_000);
      const fromBefore = await log.feed('m_1', before.nextCursor, 100);
      expect(fromBefore.events.map((e) => e.webhookId)).toEqual(after);
    } finally {
      await writer.stop();
      await recorder.stop();
      await database.close();
      await broker.close();
      await test.channel.deleteQueue(deliveries).catch(() => {});
      await db.drop();
    }
  }, 60_000);

  it('deliveries: the recorder declares the stream again itself and is ready, with no record written, where it said RabbitMQ was unreachable until one was', async () => {
    const prefix = uniquePrefix('deleted-deliveries-quiet');
    const { deliveries } = topologyNames(prefix);
    const db = await createTestDatabase('deleted_deliveries_quiet');
    const program = await startRecorder(loadRecorderConfig({ RABBITMQ_URL: brokerUrl(), TOPOLOGY_PREFIX: prefix, DATABASE_URL: db.url, METRICS_PORT: '0' }), silentLogger());
    const ready = async () => (await fetch(`http://127.0.0.1:${program.metricsPort}/readyz`)).status === 200;
    try {
      await waitFor('the recorder ready and leading', async () => program.recorder.state.leading && (await ready()), 15_000);
      // A quiet hour: no dispatcher writes a record that would declare it again.
      await test.channel.deleteQueue(deliveries);
      await waitFor('the stream declared again and the recorder ready', async () => (await test.messageCount(deliveries).then(() => true, () => false)) && (await ready()), 10_000, 200);
    } finally {
      await program.stop();
      await test.channel.deleteQueue(deliveries).catch(() => {});
      await db.drop();
    }
  }, 45_000);

  it('a recorder whose first read of the stream fails as it takes the lead lets the lead go and takes it again, and stores what comes', async () => {
    const prefix = uniquePrefix('recorder-lead');
    const broker = new BrokerConnection({ url: brokerUrl(), name: 'test-recorder-lead', logger: silentLogger() });
    await broker.open(10_000);
    const db = await createTestDatabase('recorder_lead');
    const database = openPostgres(db.url);
    const writer = new DeliveryRecorder(broker, silentLogger(), { prefix, maxRecords: 1 });
    // The first consume fails as one does when the connection drops at that moment.
    let refused = 0;
    const flaky = new Proxy(broker, {
      get(target, key, receiver) {
        if (key === 'consume' && refused === 0) return async () => { refused++; throw new BrokerUnavailableError('not connected to RabbitMQ'); };
        const value = Reflect.get(target, key, receiver);
        return typeof value === 'function' ? value.bind(target) : value;
      },
    });
    const recorder = new DeliveryLogRecorder(flaky, database, silentLogger(), { prefix, retentionMs: 86_400_000, retryMs: 200 });
    const stored = async () => (await db.query<{ webhook_id: string }>('SELECT webhook_id FROM delivery_webhooks').catch(() => [])).map((r) => r.webhook_id);
    try {
      await writer.start();
      await recorder.start();
      await writer.record({ webhookId: 'wh_after_refusal', merchantId: 'm_1', event: 'payout', references: ['po-1'], firstSeenAt: new Date().toISOString(), outcome: 'delivered', attemptNumber: 1 });
      await waitFor('the record stored by the lead taken again', async () => (await stored()).includes('wh_after_refusal'), 15_000);
      expect(refused).toBe(1);
    } finally {
      await recorder.stop();
      await writer.stop();
      await test.deleteTopology(prefix);
      await broker.close();
      await database.close();
      await db.drop();
    }
  }, 40_000);

  it('deliveries: an entry set aside in the stream declared again, at the place of one set aside before the delete, is kept beside it', async () => {
    // Offsets start over in the new stream, and set-aside rows are kept 30 days by their place:
    // the new one was dropped as a repeat of the old (the error line said set aside, no row held it).
    const prefix = uniquePrefix('deleted-deliveries-aside');
    const { deliveries } = topologyNames(prefix);
    const broker = new BrokerConnection({ url: brokerUrl(), name: 'test-deleted-deliveries-aside', logger: silentLogger() });
    await broker.open(10_000);
    const db = await createTestDatabase('deleted_deliveries_aside');
    const database = openPostgres(db.url);
    // No checkpoints of its own meanwhile: each stream's offset 0 is the test's entry.
    const newRecorder = () => new DeliveryLogRecorder(broker, database, silentLogger(), { prefix, retentionMs: 86_400_000, retryMs: 200, checkpointEveryMs: 600_000 });
    const setAside = async () =>
      (await db.query<{ stream_offset: string; position: number; content: string }>('SELECT stream_offset, position, content FROM delivery_log_quarantine WHERE stream = $1 ORDER BY quarantined_at', [deliveries]).catch(() => [])).map((r) => [Number(r.stream_offset), r.position, r.content]);
    let recorder = newRecorder();
    try {
      await declareQueueSpec(() => broker.createChannel(), deliveriesSpec(prefix));
      await test.publishRaw(deliveries, Buffer.from('{"before the delete":'));
      await recorder.start();
      await waitFor('the first entry set aside', async () => (await setAside()).length === 1, 15_000);
      await recorder.stop();

      await test.channel.deleteQueue(deliveries);
      await declareQueueSpec(() => broker.createChannel(), deliveriesSpec(prefix));
      await test.publishRaw(deliveries, Buffer.from('{"after the delete":'));
      recorder = newRecorder();
      await recorder.start();
      await waitFor('the new stream\'s entry set aside', async () => recorder.state.rejected === 1, 15_000);
      expect(await setAside()).toEqual([
        [0, -1, '{"before the delete":'],
        [0, -1, '{"after the delete":'],
      ]);
    } finally {
      await recorder.stop();
      await test.channel.deleteQueue(deliveries).catch(() => {});
      await broker.close();
      await database.close();
      await db.drop();
    }
  }, 45_000);
});
