import { createHash } from 'node:crypto';
import amqp from 'amqplib';
import { loadDispatcherConfig } from '../../apps/dispatcher/config.js';
import { type DispatcherProgram, startDispatcher } from '../../apps/dispatcher/program.js';
import { loadRecorderConfig } from '../../apps/recorder/config.js';
import { type RecorderProgram, startRecorder } from '../../apps/recorder/program.js';
import { deliveryLogQueries, openPostgres } from '../../libs/delivery-store/index.js';
import { HEADERS, sampleEvent } from '../../libs/contracts/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { capturingLogger } from '../support/capturing-logger.js';
import { BrokerConnection } from '../../libs/broker/index.js';
import { EventPublisher } from '../../libs/publisher/index.js';
import { topologyNames } from '../../libs/topology/index.js';
import { TestBroker, brokerUrl, deleteTopologyOf, uniquePrefix } from '../support/broker.js';
import { testMerchant, testSecret } from '../support/harness.js';
import { seedMerchants, TEST_SECRETS_KEY } from '../support/merchant-rows.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';
import { PrivatePostgres } from '../support/private-postgres.js';
import { Receiver, type ReceivedRequest } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

/**
 * Idempotent intake (issue 55): an upstream message whose key (messageId, else the body's digest)
 * was seen within INTAKE_DEDUPE_WINDOW is acked and not delivered again; only first sight is
 * checked. Each test was seen failing on a broken variant (see the report of the change that added them).
 */

/** Requests the receiver got for one webhook id. */
const deliveriesOf = (receiver: Receiver, webhookId: string): ReceivedRequest[] => receiver.requests.filter((r) => r.headers['webhook-id'] === webhookId);

describe('idempotent intake', () => {
  const prefix = uniquePrefix('intake-dedupe');
  const names = topologyNames(prefix);
  const merchant = testMerchant('m_dedupe', 'http://placeholder');
  // Two endpoints: its events fan out.
  const fanned = testMerchant('m_dedupe_fan', 'http://placeholder');
  let receiver: Receiver;
  let database: TestDatabase;
  let program: DispatcherProgram | undefined;
  let recorder: RecorderProgram | undefined;
  let upstream: BrokerConnection;
  let publisher: EventPublisher;
  let test: TestBroker;

  /** What a dispatcher that died between its intake check and its ack leaves: the key's row. */
  const leftBehind = (merchantId: string, webhookId: string) =>
    database.query("INSERT INTO intake_keys (day, merchant_id, webhook_id) VALUES (date_trunc('day', now(), 'UTC'), $1, $2)", [merchantId, webhookId]);
  /** The log's row of one endpoint's delivery, as the recorder writes it. */
  const recordedDelivery = (merchantId: string, webhookId: string, endpointId: string, seq: number) =>
    database.query(
      `INSERT INTO delivery_webhooks (merchant_id, webhook_id, endpoint_id, first_seen_at, seq, event, refs, merchant_refs, status, attempts, last_record_at)
       VALUES ($1, $2, $3, now(), $4, 'payout', '{}', '{}', 'delivered', 1, now())`,
      [merchantId, webhookId, endpointId, seq],
    );
  /** Takes the `count` messages in dispatch and closes the channel with them unacked: the broker puts them back, marked redelivered. */
  const redeliver = async (count: number) => {
    const connection = await amqp.connect(brokerUrl());
    try {
      const channel = await connection.createChannel();
      await waitFor(`${count} in dispatch`, async () => (await channel.checkQueue(names.dispatch)).messageCount === count, 10_000);
      for (let i = 0; i < count; i++) if (!(await channel.get(names.dispatch, { noAck: false }))) throw new Error('nothing in dispatch');
      await channel.close();
    } finally {
      await connection.close();
    }
  };

  const start = async (env: Record<string, string> = {}, logger = silentLogger()) => {
    program = await startDispatcher(
      loadDispatcherConfig({
        RABBITMQ_URL: brokerUrl(),
        TOPOLOGY_PREFIX: prefix,
        SECRETS_KEY: TEST_SECRETS_KEY,
        DATABASE_URL: database.url,
        RETRY_SCHEDULE: '200ms',
        WAIT_LEASE: '5s',
        DELIVERY_TIMEOUT_MS: '2000',
        ALLOW_PRIVATE_TARGETS: 'true',
        METRICS_PORT: '0',
        FAILED_RETENTION: '1D',
        ...env,
      }),
      logger,
      // A check PostgreSQL answers late lets intake go on unchecked (2 s in production): on a loaded
      // CI machine that would deliver the repeats these cases send; the PostgreSQL-down case keeps the default.
      { intakeCheck: { timeoutMs: 15_000 } },
    );
    // The partitions are made as the dispatcher starts: a check before then is let through.
    await waitFor('the intake key partitions', async () => (await database.query("SELECT 1 FROM pg_class WHERE relname LIKE 'intake\\_keys\\_%'")).length >= 2, 10_000);
  };
  const stop = async () => {
    await program?.stop();
    program = undefined;
  };
  /** Publishes `marker` after the rest and waits for it: what was published before it has been taken. */
  const settled = async (marker: string) => {
    await publisher.publish(sampleEvent('payout', merchant.id), { messageId: marker });
    await waitFor(`${marker} delivered`, () => deliveriesOf(receiver, marker).length > 0, 10_000);
  };

  beforeAll(async () => {
    // 500 to the first attempt of evt_retry_1 only, 204 to the rest.
    let failedOnce = false;
    receiver = await Receiver.start((_n, req) => {
      if (req.headers['webhook-id'] === 'evt_retry_1' && !failedOnce) {
        failedOnce = true;
        return 500;
      }
      return 204;
    });
    merchant.endpoints[0]!.url = receiver.url;
    fanned.endpoints = [
      { id: 'ep_dedupe_a', url: `${receiver.url}/a`, enabled: true, secret: testSecret() },
      { id: 'ep_dedupe_b', url: `${receiver.url}/b`, enabled: true, secret: testSecret() },
    ];
    database = await createTestDatabase('intake_dedupe');
    await seedMerchants(database.url, [merchant, fanned]);
    test = await TestBroker.open();
    await start();
    recorder = await startRecorder(loadRecorderConfig({ RABBITMQ_URL: brokerUrl(), TOPOLOGY_PREFIX: prefix, DATABASE_URL: database.url, FAILED_RETENTION: '1D' }), silentLogger());
    upstream = new BrokerConnection({ url: brokerUrl(), name: 'test-intake-upstream', logger: silentLogger() });
    await upstream.open(10_000);
    publisher = new EventPublisher(upstream, prefix);
  });

  afterAll(async () => {
    await upstream?.close();
    await recorder?.stop();
    await stop();
    await test?.deleteTopology(prefix);
    await test?.close();
    await receiver?.close();
    await database?.drop();
  });

  it('delivers a messageId published twice once, counts the repeat, shows it on the original, and still after a dispatcher restart', async () => {
    const event = sampleEvent('charge.completed', merchant.id);
    await publisher.publish(event, { messageId: 'evt_twice_1' });
    await publisher.publish(event, { messageId: 'evt_twice_1' });
    await settled('evt_marker_1');
    await waitFor('the repeat counted', () => program!.dispatcher.stats.duplicates === 1, 10_000);
    const metrics = await (await fetch(`http://127.0.0.1:${program!.metricsPort}/metrics`)).text();
    expect(metrics).toMatch(/^webhooks_duplicates_total\{program="dispatcher"\} 1$/m);

    await stop();
    await start();
    await publisher.publish(event, { messageId: 'evt_twice_1' });
    await settled('evt_marker_2');
    await waitFor('the repeat counted after the restart', () => program!.dispatcher.stats.duplicates === 1, 10_000);
    expect(deliveriesOf(receiver, 'evt_twice_1')).toHaveLength(1);
    // Shown with the original in the delivery log (GET /nucleus/webhooks/{id} reads the same).
    const db = openPostgres(database.url, { maxConnections: 1 });
    try {
      const log = deliveryLogQueries(db);
      const shown = await waitFor('the repeats shown on the original in the log', async () => {
        const webhook = await log.getWebhook(merchant.id, 'evt_twice_1');
        return webhook?.duplicates === 2 && webhook;
      }, 15_000);
      expect(shown.status).toBe('delivered');
      expect(shown.records.map((r) => r.outcome)).toEqual(['delivered']);
      expect(Date.parse(shown.lastDuplicateAt!)).toBeGreaterThan(Date.parse(shown.firstSeenAt));
    } finally {
      await db.close();
    }
  });

  it('delivers two identical bodies without a messageId once: the body digest is the key', async () => {
    const body = Buffer.from(JSON.stringify(sampleEvent('payout', merchant.id)));
    const duplicates = program!.dispatcher.stats.duplicates;
    const channel = await upstream.createChannel();
    try {
      for (let i = 0; i < 2; i++) channel.publish(names.events, 'payout', body, { persistent: true, contentType: 'application/json' });
    } finally {
      await channel.close();
    }
    const before = receiver.requests.length;
    const fresh = () => receiver.requests.slice(before).filter((r) => r.headers['webhook-id'] !== 'evt_marker_3');
    await waitFor('the body delivered', () => fresh().length > 0, 10_000);
    await waitFor('the repeat counted', () => program!.dispatcher.stats.duplicates === duplicates + 1, 10_000);
    await settled('evt_marker_3');
    expect(fresh()).toHaveLength(1);
    expect(String(fresh()[0]!.headers['webhook-id'])).toMatch(/^msg_[0-9a-f]{32}$/);
  });

  it('never swallows a retry or a resend of a webhook as a repeat', async () => {
    const event = sampleEvent('refund.completed', merchant.id);
    const duplicates = program!.dispatcher.stats.duplicates;
    await publisher.publish(event, { messageId: 'evt_retry_1' });
    // The first attempt fails (500); its retry is a hand-back of its wait, 200 ms later.
    await waitFor('the retry delivered', () => deliveriesOf(receiver, 'evt_retry_1').length === 2, 15_000);
    // A resend's copy, as the API publishes it straight to dispatch.
    await test.publishRaw(names.dispatch, Buffer.from(JSON.stringify(event)), {
      messageId: 'evt_retry_1',
      contentType: 'application/json',
      headers: { [HEADERS.resentAt]: new Date().toISOString(), [HEADERS.resend]: 1 },
    });
    await waitFor('the resend delivered', () => deliveriesOf(receiver, 'evt_retry_1').length === 3, 10_000);
    expect(program!.dispatcher.stats.duplicates).toBe(duplicates);
  });

  it('delivers the redelivery of a first copy the log holds no record of (a dispatcher died before its ack), not of one it holds', async () => {
    // A webhook delivered, and recorded in the log by the recorder.
    await publisher.publish(sampleEvent('payout', merchant.id), { messageId: 'evt_ended_1' });
    await waitFor('evt_ended_1 delivered', () => deliveriesOf(receiver, 'evt_ended_1').length === 1, 10_000);
    await waitFor('evt_ended_1 in the log', async () => (await database.query("SELECT 1 FROM delivery_webhooks WHERE webhook_id = 'evt_ended_1'")).length === 1, 15_000);
    await stop();
    // What a dispatcher that died between its check and its ack leaves: the key's row, no record,
    // and the message back in dispatch, redelivered. And a redelivered repeat of evt_ended_1.
    await leftBehind(merchant.id, 'evt_crashed_1');
    await publisher.publish(sampleEvent('payout', merchant.id), { messageId: 'evt_crashed_1' });
    await publisher.publish(sampleEvent('payout', merchant.id), { messageId: 'evt_ended_1' });
    await redeliver(2);
    await start();
    await settled('evt_marker_4');
    await waitFor('the recorded one dropped', () => program!.dispatcher.stats.duplicates === 1, 10_000);
    await waitFor('the crashed one delivered', () => deliveriesOf(receiver, 'evt_crashed_1').length > 0, 10_000);
    expect(deliveriesOf(receiver, 'evt_crashed_1')).toHaveLength(1);
    expect(deliveriesOf(receiver, 'evt_ended_1')).toHaveLength(1);
  });

  it('drops a redelivered repeat of a fanned-out event both endpoints settled, and sends a redelivered one a dispatcher left half done to the endpoint it missed', async () => {
    const at = (webhookId: string, endpoint: 'a' | 'b') => deliveriesOf(receiver, webhookId).filter((r) => r.path.endsWith(`/${endpoint}`));
    // Delivered to both endpoints, and both deliveries recorded in the log.
    await publisher.publish(sampleEvent('payout', fanned.id), { messageId: 'evt_fan_ended' });
    await waitFor('evt_fan_ended on both endpoints', () => at('evt_fan_ended', 'a').length === 1 && at('evt_fan_ended', 'b').length === 1, 10_000);
    await waitFor('both in the log', async () => (await database.query("SELECT 1 FROM delivery_webhooks WHERE webhook_id = 'evt_fan_ended'")).length === 2, 15_000);
    await stop();
    // What a dispatcher that died mid-fan-out leaves: the key's row, endpoint a's record and not
    // b's, and the message back in dispatch, redelivered. And a redelivered repeat of evt_fan_ended.
    await leftBehind(fanned.id, 'evt_fan_half');
    await recordedDelivery(fanned.id, 'evt_fan_half', 'ep_dedupe_a', 1000000);
    await publisher.publish(sampleEvent('payout', fanned.id), { messageId: 'evt_fan_half' });
    await publisher.publish(sampleEvent('payout', fanned.id), { messageId: 'evt_fan_ended' });
    await redeliver(2);
    await start();
    await waitFor('the half-done one sent to b', () => at('evt_fan_half', 'b').length > 0, 10_000);
    await settled('evt_marker_5');
    await waitFor('the settled repeat dropped', () => program!.dispatcher.stats.duplicates === 1, 10_000);
    expect([at('evt_fan_half', 'a').length, at('evt_fan_half', 'b').length]).toEqual([0, 1]);
    expect([at('evt_fan_ended', 'a').length, at('evt_fan_ended', 'b').length]).toEqual([1, 1]);
    // The log's count on the original is of the copies dropped: the half-done one's own redelivery, delivered, is none.
    const duplicates = async (webhookId: string) => (await database.query<{ duplicates: number }>('SELECT duplicates FROM intake_keys WHERE webhook_id = $1', [webhookId]))[0]?.duplicates;
    await waitFor('the dropped repeat counted on its original', async () => (await duplicates('evt_fan_ended')) === 1, 10_000);
    expect(await duplicates('evt_fan_half')).toBe(0);
  });

  it('drops the redelivery of a first copy whose wait its dispatcher wrote before it died, before the log holds its record: the wait carries it', async () => {
    const at = (webhookId: string, endpoint: 'a' | 'b') => deliveriesOf(receiver, webhookId).filter((r) => r.path.endsWith(`/${endpoint}`));
    /** A wait written by the walk that died (due in an hour: its hand-back is not this test's). */
    const waitLeft = (merchantId: string, webhookId: string, endpointId: string) =>
      database.query(
        `INSERT INTO webhook_waits (merchant_id, webhook_id, endpoint_id, attempt, due_at, pick_at, reason, headers)
         VALUES ($1, $2, $3, 1, now() + interval '1 hour', now() + interval '1 hour', 'retry', '{}')`,
        [merchantId, webhookId, endpointId],
      );
    await stop();
    // What a dispatcher that died after its first attempt failed and its wait was written, before
    // its record reached the log and before its ack, leaves: the key's row, the wait, the message
    // back in dispatch, redelivered. The same mid-fan-out: endpoint a recorded, b waiting.
    await leftBehind(merchant.id, 'evt_waiting_1');
    await waitLeft(merchant.id, 'evt_waiting_1', merchant.endpoints[0]!.id);
    await leftBehind(fanned.id, 'evt_fan_waiting');
    await recordedDelivery(fanned.id, 'evt_fan_waiting', 'ep_dedupe_a', 1000001);
    await waitLeft(fanned.id, 'evt_fan_waiting', 'ep_dedupe_b');
    try {
      await publisher.publish(sampleEvent('payout', merchant.id), { messageId: 'evt_waiting_1' });
      await publisher.publish(sampleEvent('payout', fanned.id), { messageId: 'evt_fan_waiting' });
      await redeliver(2);
      await start();
      await settled('evt_marker_6');
      await waitFor('both redelivered copies dropped', () => program!.dispatcher.stats.duplicates === 2, 10_000);
      expect(deliveriesOf(receiver, 'evt_waiting_1')).toHaveLength(0);
      expect([at('evt_fan_waiting', 'a').length, at('evt_fan_waiting', 'b').length]).toEqual([0, 0]);
    } finally {
      await database.query("DELETE FROM webhook_waits WHERE webhook_id IN ('evt_waiting_1', 'evt_fan_waiting')");
    }
  });

  it("drops a redelivered copy whose body differs from its key's first, with the warning, though the log holds no record of the first", async () => {
    // Seen failing (the corrected body delivered under the first's webhook-id, no warning) on the
    // checker that took every redelivered copy of an unrecorded webhook for the first's own, as before the fix.
    const original = sampleEvent('payout', merchant.id);
    const corrected = { ...original, data: { ...original.data, status: 'reversed' } };
    await stop();
    // The first copy taken (its key and its body's digest), its delivery not yet in the log (an endpoint
    // slow to answer, the recorder behind); upstream's corrected publish, which a dispatcher took and
    // died holding, back in dispatch, redelivered.
    const digest = createHash('sha256').update(JSON.stringify(original)).digest().subarray(0, 16);
    await database.query("INSERT INTO intake_keys (day, merchant_id, webhook_id, body_digest) VALUES (date_trunc('day', now(), 'UTC'), $1, 'evt_corrected_1', $2)", [merchant.id, digest]);
    await publisher.publish(corrected, { messageId: 'evt_corrected_1' });
    await redeliver(1);
    const lines: Array<Record<string, unknown>> = [];
    await start({}, capturingLogger(lines));
    await settled('evt_marker_7');
    await waitFor('the corrected copy dropped', () => program!.dispatcher.stats.duplicates === 1, 10_000);
    expect(deliveriesOf(receiver, 'evt_corrected_1')).toHaveLength(0);
    expect(lines.filter((line) => /body unlike its original/.test(String(line.message))).map((line) => [line.level, line.webhookId])).toEqual([['warn', 'evt_corrected_1']]);
  });

  it('sends a redelivered one to its endpoint when the log holds only the delivery of an endpoint disabled since (it routes to one now)', async () => {
    const at = (webhookId: string, endpoint: 'a' | 'b') => deliveriesOf(receiver, webhookId).filter((r) => r.path.endsWith(`/${endpoint}`));
    await stop();
    // A dispatcher died mid-fan-out with b settled and a not; b was disabled since.
    await leftBehind(fanned.id, 'evt_fan_moved');
    await recordedDelivery(fanned.id, 'evt_fan_moved', 'ep_dedupe_b', 1000001);
    await seedMerchants(database.url, [{ ...fanned, endpoints: [fanned.endpoints[0]!, { ...fanned.endpoints[1]!, enabled: false, disabledReason: 'manual' }] }]);
    await publisher.publish(sampleEvent('payout', fanned.id), { messageId: 'evt_fan_moved' });
    await redeliver(1);
    await start();
    await waitFor('sent to a', () => at('evt_fan_moved', 'a').length > 0, 10_000);
    await settled('evt_marker_6');
    expect([at('evt_fan_moved', 'a').length, at('evt_fan_moved', 'b').length]).toEqual([1, 0]);
    expect(program!.dispatcher.stats.duplicates).toBe(0);
  });

  it('drops the key partitions past the window on a dispatcher with the check off (INTAKE_DEDUPE_WINDOW=0), as on one with it on', async () => {
    await stop();
    // A key of three days ago, taken while the check was on.
    const old = new Date(Date.now() - 3 * 86_400_000).toISOString().slice(0, 10);
    const partition = `intake_keys_${old.replaceAll('-', '')}`;
    await database.query(`CREATE TABLE ${partition} PARTITION OF intake_keys FOR VALUES FROM ('${old}T00:00:00Z') TO ('${old}T00:00:00Z'::timestamptz + interval '1 day')`);
    await database.query(`INSERT INTO ${partition} (day, merchant_id, webhook_id) VALUES ($1, $2, 'evt_kept_off')`, [`${old}T00:00:00Z`, merchant.id]);
    await start({ INTAKE_DEDUPE_WINDOW: '0' });
    await waitFor(`${partition} dropped`, async () => (await database.query('SELECT 1 FROM pg_class WHERE relname = $1', [partition])).length === 0, 10_000);
  });
});

describe('idempotent intake while PostgreSQL is down', () => {
  const prefix = uniquePrefix('intake-pg-down');
  let server: PrivatePostgres | undefined;
  let receiver: Receiver | undefined;
  let program: DispatcherProgram | undefined;

  afterAll(async () => {
    await program?.stop();
    await receiver?.close();
    await server?.stop();
    await deleteTopologyOf(prefix);
  });

  it('goes on: the check is skipped, so a repeat is delivered again with the same webhook-id', async () => {
    server = await PrivatePostgres.start();
    if (!server) return console.warn('skipped: no initdb here (PG_BIN_DIR)');
    receiver = await Receiver.start(() => 204);
    const merchant = testMerchant('m_dedupe_down', receiver.url);
    await seedMerchants(server.url, [merchant]);
    program = await startDispatcher(
      loadDispatcherConfig({
        RABBITMQ_URL: brokerUrl(),
        TOPOLOGY_PREFIX: prefix,
        SECRETS_KEY: TEST_SECRETS_KEY,
        DATABASE_URL: server.url,
        RETRY_SCHEDULE: '',
        ALLOW_PRIVATE_TARGETS: 'true',
        METRICS_PORT: '0',
        FAILED_RETENTION: '1D',
      }),
      silentLogger(),
    );
    const publisher = new EventPublisher(program.broker, prefix);
    const event = sampleEvent('payout', merchant.id);
    const pg = await import('pg');
    const client = new pg.default.Client({ connectionString: server.url });
    await client.connect();
    try {
      await waitFor('the intake key partitions', async () => (await client.query("SELECT 1 FROM pg_class WHERE relname LIKE 'intake\\_keys\\_%'")).rows.length >= 2, 10_000);
    } finally {
      await client.end();
    }
    await publisher.publish(event, { messageId: 'evt_down_1' });
    await receiver.waitForRequests(1, 10_000);
    await publisher.publish(event, { messageId: 'evt_down_1' });
    await publisher.publish(event, { messageId: 'evt_down_marker_1' });
    await receiver.waitForRequests(2, 10_000);
    await waitFor('the repeat dropped while PostgreSQL is up', () => program!.dispatcher.stats.duplicates === 1, 10_000);

    await server.crash();
    await publisher.publish(event, { messageId: 'evt_down_1' });
    await publisher.publish(event, { messageId: 'evt_down_2' });
    await waitFor('both delivered without the check', () => receiver!.requests.length === 4, 15_000);
    const ids = receiver.requests.map((r) => String(r.headers['webhook-id']));
    expect(ids.slice(0, 2)).toEqual(['evt_down_1', 'evt_down_marker_1']);
    expect(ids.slice(2).sort()).toEqual(['evt_down_1', 'evt_down_2']);
    expect(program.dispatcher.stats.duplicates).toBe(1);
  });
});
