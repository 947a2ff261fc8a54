import { loadDispatcherConfig } from '../../apps/dispatcher/config.js';
import { type DispatcherProgram, startDispatcher } from '../../apps/dispatcher/program.js';
import { loadRecorderConfig } from '../../apps/recorder/config.js';
import { type RecorderProgram, startRecorder } from '../../apps/recorder/program.js';
import { sampleEvent } from '../../libs/contracts/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { declareTopology, topologyNames } from '../../libs/topology/index.js';
import { brokerUrl, TestBroker, uniquePrefix } from '../support/broker.js';
import { runCliInProcess } from '../support/cli.js';
import { testMerchant, writeMerchantsFile } from '../support/harness.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';
import { Receiver, type ReceivedRequest } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

const deliveriesOf = (receiver: Receiver, webhookId: string): ReceivedRequest[] => receiver.requests.filter((r) => r.headers['webhook-id'] === webhookId);

/**
 * An upstream event the broker parked itself from dispatch (its delivery limit, a TTL) carries the
 * broker's x-death entry for dispatch, never our x-original-routing-key: `webhooks invalid list`
 * must show the routing key from that entry, and the copy `requeue` moves back must be checked as
 * a redelivery, as a moved-back copy of our own park is. Found by a review (2026-11-30); each case failed on the
 * code before its fix. One dispatcher as deployed (the intake check on) and the recorder.
 */
describe('upstream events the broker parked, listed and moved back with webhooks invalid', () => {
  const prefix = uniquePrefix('invalid-broker-park');
  const names = topologyNames(prefix);
  const merchant = testMerchant('m_bp', 'http://placeholder');
  let receiver: Receiver;
  let database: TestDatabase;
  let program: DispatcherProgram | undefined;
  let recorder: RecorderProgram | undefined;
  let test: TestBroker;
  const cli = (...args: string[]) => runCliInProcess({ RABBITMQ_URL: brokerUrl(), TOPOLOGY_PREFIX: prefix }, args);
  const body = (reference: string) => Buffer.from(JSON.stringify({ ...sampleEvent('payout', merchant.id), data: { ...sampleEvent('payout', merchant.id).data, reference } }));

  const publish = async (routingKey: string, content: Buffer, options: Record<string, unknown>) => {
    const ch = await test.connection.createConfirmChannel();
    ch.publish(names.events, routingKey, content, { persistent: true, contentType: 'application/json', ...options });
    await ch.waitForConfirms();
    await ch.close();
  };

  beforeAll(async () => {
    receiver = await Receiver.start(() => 204);
    merchant.endpoints[0]!.url = receiver.url;
    database = await createTestDatabase('invalid_broker_park');
    test = await TestBroker.open();
    await declareTopology(() => test.connection.createChannel(), { prefix, failedRetention: '1D' });
    // Parked by the broker before any dispatcher runs: returned to its delivery limit.
    await publish('payout', body('PO-BP-REPEAT'), { messageId: 'evt_bp_repeat' });
    await test.returnUntilParked(names.dispatch, names.invalid, 1);
    const env = { RABBITMQ_URL: brokerUrl(), TOPOLOGY_PREFIX: prefix, DATABASE_URL: database.url, FAILED_RETENTION: '1D' };
    program = await startDispatcher(
      loadDispatcherConfig({ ...env, MERCHANTS_FILE: writeMerchantsFile([merchant]), RETRY_SCHEDULE: '200ms', DELIVERY_TIMEOUT_MS: '2000', ALLOW_PRIVATE_TARGETS: 'true', METRICS_PORT: '0' }),
      silentLogger(),
      { intakeCheck: { timeoutMs: 15_000 } },
    );
    await waitFor('the intake key partitions', async () => (await database.query("SELECT 1 FROM pg_class WHERE relname LIKE 'intake\\_keys\\_%'")).length >= 2, 10_000);
    recorder = await startRecorder(loadRecorderConfig(env), silentLogger());
  }, 60_000);

  afterAll(async () => {
    await recorder?.stop();
    await program?.stop();
    await test?.deleteTopology(prefix);
    await test?.close();
    await receiver?.close();
    await database?.drop();
  });

  it("lists an upstream event the broker parked with the routing key it was published with (its x-death entry's), also once listed before", async () => {
    for (const pass of [1, 2]) {
      const listed = JSON.parse((await cli('invalid', 'list', '--json')).stdout) as Array<{ messageId: string; code: string | null; originalRoutingKey: string | null }>;
      expect([pass, listed.find((m) => m.messageId === 'evt_bp_repeat')]).toEqual([pass, expect.objectContaining({ code: 'delivery-limit', originalRoutingKey: 'payout' })]);
    }
  }, 30_000);

  it('checks the key of an upstream event the broker parked, moved back, as a redelivery: not sent again where it was delivered', async () => {
    // Upstream published it again meanwhile: delivered, and in the log (as a first copy delivered before its crash loop would be).
    await publish('payout', body('PO-BP-REPEAT'), { messageId: 'evt_bp_repeat' });
    await waitFor('the repeat delivered', () => deliveriesOf(receiver, 'evt_bp_repeat').length === 1, 10_000);
    await waitFor('in the log', async () => (await database.query("SELECT 1 FROM delivery_webhooks WHERE webhook_id = 'evt_bp_repeat'")).length === 1, 15_000);
    const duplicates = program!.dispatcher.stats.duplicates;
    expect((await cli('invalid', 'requeue', '--code', 'delivery-limit')).code).toBe(0);
    await waitFor('the moved-back copy taken', () => program!.dispatcher.stats.duplicates > duplicates || deliveriesOf(receiver, 'evt_bp_repeat').length > 1, 10_000);
    expect(deliveriesOf(receiver, 'evt_bp_repeat')).toHaveLength(1);
  }, 60_000);
});
