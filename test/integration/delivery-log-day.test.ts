import pg from 'pg';
import { BrokerConnection } from '../../libs/broker/index.js';
import { type DeliveryRecordInput, DeliveryRecorder } from '../../libs/delivery-log/index.js';
import { DeliveryLogRecorder, openPostgres } from '../../libs/delivery-store/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { brokerUrl, TestBroker, uniquePrefix } from '../support/broker.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';
import { waitFor } from '../support/wait.js';

/**
 * A new UTC day's first record, while the log is being read. Making a day's partition
 * (CREATE TABLE … PARTITION OF) takes a lock on delivery_records that waits for every read in
 * flight and holds back every read after it: made on demand by the day's first record, the
 * recorder stalled at midnight behind a merchant's long listing (and the listings behind it), up
 * to its lock timeout, then gave the lead up. The recorder makes tomorrow's ahead, as intake keys' are.
 */
describe("the delivery log at a new day's first record", () => {
  const prefix = uniquePrefix('delivery-log-day');
  let database: TestDatabase;
  let test: TestBroker;
  let broker: BrokerConnection;
  let writer: DeliveryRecorder;

  beforeAll(async () => {
    database = await createTestDatabase('delivery_log_day');
    test = await TestBroker.open();
    broker = new BrokerConnection({ url: brokerUrl(), name: 'delivery-log-day-test', logger: silentLogger() });
    await broker.open();
    writer = new DeliveryRecorder(broker, silentLogger(), { prefix, maxRecords: 20 });
    await writer.start();
  });

  afterAll(async () => {
    await writer?.stop();
    await broker?.close();
    await test?.deleteTopology(prefix);
    await test?.close();
    await database?.drop();
  });

  it("is stored while a read of the log holds its transaction open: tomorrow's partition was made ahead", async () => {
    const db = openPostgres(database.url);
    const recorder = new DeliveryLogRecorder(broker, db, silentLogger(), { prefix, retentionMs: 30 * 86_400_000, retryMs: 200 });
    const reader = new pg.Client({ connectionString: database.url });
    await reader.connect();
    try {
      await recorder.start();
      await waitFor('the recorder leading', async () => recorder.state.leading, 20_000);
      // Today's first record, so today's partition exists whichever way partitions are made.
      await writer.record(recordAt('wh_today', new Date()));
      await waitFor("today's record stored", async () => (await database.query("SELECT 1 FROM delivery_records WHERE webhook_id = 'wh_today'")).length === 1, 20_000);

      // A merchant's listing, still reading (a long page, a slow client): its transaction holds its lock.
      await reader.query('BEGIN');
      await reader.query('SELECT count(*) FROM delivery_records');
      const tomorrow = new Date(Date.now() + 86_400_000);
      await writer.record(recordAt('wh_tomorrow', tomorrow));
      // Within 5 s, while the read goes on (the recorder's lock timeout is 10 s).
      await waitFor("tomorrow's record stored while the read holds its lock", async () => (await database.query("SELECT 1 FROM delivery_records WHERE webhook_id = 'wh_tomorrow'")).length === 1, 5_000);
    } finally {
      await reader.query('ROLLBACK').catch(() => {});
      await reader.end();
      await recorder.stop();
      await db.close();
    }
  });

  it("takes the lead and stores today's records while a read holds its transaction open and tomorrow's partition is not made yet (a new day's first hour)", async () => {
    const db = openPostgres(database.url);
    const first = new DeliveryLogRecorder(broker, db, silentLogger(), { prefix, retentionMs: 30 * 86_400_000, retryMs: 200 });
    const reader = new pg.Client({ connectionString: database.url });
    await reader.connect();
    let second: DeliveryLogRecorder | undefined;
    try {
      await first.start();
      await waitFor('the first recorder leading', async () => first.state.leading, 20_000);
      await writer.record(recordAt('wh_led', new Date()));
      await waitFor("today's record stored", async () => (await database.query("SELECT 1 FROM delivery_records WHERE webhook_id = 'wh_led'")).length === 1, 20_000);
      await first.stop();
      // The day turned since the last upkeep: tomorrow's partition is not made yet (it holds no row).
      const tomorrow = new Date(Date.now() + 86_400_000).toISOString().slice(0, 10).replaceAll('-', '');
      await database.query(`DROP TABLE IF EXISTS delivery_records_${tomorrow}`);
      // A long read (a listing, an export, pg_dump) holds its lock on delivery_records.
      await reader.query('BEGIN');
      await reader.query('SELECT count(*) FROM delivery_records');
      // The next leader (a restart, a deploy) stores today's records all the same: the upkeep that
      // cannot make tomorrow's partition now is tried again later, never the lead given up for it.
      second = new DeliveryLogRecorder(broker, db, silentLogger(), { prefix, retentionMs: 30 * 86_400_000, retryMs: 200 });
      await second.start();
      await writer.record(recordAt('wh_during_read', new Date()));
      await waitFor("today's record stored while the read holds its lock", async () => (await database.query("SELECT 1 FROM delivery_records WHERE webhook_id = 'wh_during_read'")).length === 1, 8_000);
    } finally {
      await reader.query('ROLLBACK').catch(() => {});
      await reader.end();
      await second?.stop();
      await first.stop();
      await db.close();
    }
  }, 60_000);

  it('takes the lead and stores records while a read holds its transaction open and a partition past retention is due to be dropped', async () => {
    // A day long past retention, as the hourly upkeep finds it: dropping it locks the whole table.
    await database.query('CREATE TABLE IF NOT EXISTS delivery_records_20200101 PARTITION OF delivery_records FOR VALUES FROM (\'2020-01-01T00:00:00Z\') TO (\'2020-01-02T00:00:00Z\')');
    const db = openPostgres(database.url);
    const reader = new pg.Client({ connectionString: database.url });
    await reader.connect();
    const recorder = new DeliveryLogRecorder(broker, db, silentLogger(), { prefix, retentionMs: 30 * 86_400_000, retryMs: 200 });
    try {
      await reader.query('BEGIN');
      await reader.query('SELECT count(*) FROM delivery_records');
      await recorder.start();
      await writer.record(recordAt('wh_during_drop', new Date()));
      // Within 8 s, while the read goes on: the drop waits 1 s, is left for the next upkeep, the lead kept.
      await waitFor("today's record stored while the read holds its lock", async () => (await database.query("SELECT 1 FROM delivery_records WHERE webhook_id = 'wh_during_drop'")).length === 1, 8_000);
      await reader.query('ROLLBACK');
      const left = await database.query("SELECT 1 FROM pg_class WHERE relname = 'delivery_records_20200101'");
      expect(left).toHaveLength(1);
    } finally {
      await reader.query('ROLLBACK').catch(() => {});
      await reader.end();
      await recorder.stop();
      await db.close();
    }
  }, 60_000);
});

function recordAt(webhookId: string, at: Date): DeliveryRecordInput {
  const time = at.toISOString();
  return {
    webhookId,
    merchantId: 'm_day',
    event: 'payout',
    references: [`po-${webhookId}`],
    firstSeenAt: time,
    at: time,
    payload: JSON.stringify({ event: 'payout', data: { reference: `po-${webhookId}` } }),
    outcome: 'delivered',
    attemptNumber: 1,
    attempt: { startedAt: time, durationMs: 3, httpStatus: 200 },
  };
}
