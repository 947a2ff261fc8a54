import { BrokerConnection } from '../../libs/broker/index.js';
import { DeliveryRecorder } from '../../libs/delivery-log/index.js';
import { DeliveryLogRecorder, openPostgres } from '../../libs/delivery-store/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { brokerUrl, TestBroker, uniquePrefix } from '../support/broker.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';
import { waitFor } from '../support/wait.js';

/**
 * The recorder's upkeep deletes what is past retention when it takes the lead. A delete that ran past
 * its statement timeout (failures piled up while the log was off, or retention lowered) failed the
 * lead, and the recorder tried again every second for ever, storing nothing: the log and the feed
 * stopped, and the deliveries stream dropped what it held past its bounds. A slow trigger on
 * failed_webhooks stands for the pile here, against a recorder whose statements time out at 300 ms.
 */
describe("the recorder's upkeep running past its statement timeout", () => {
  const prefix = uniquePrefix('recorder-upkeep-timeout');
  let db: TestDatabase;
  let test: TestBroker;
  let broker: BrokerConnection;

  beforeAll(async () => {
    db = await createTestDatabase('recorder_upkeep_timeout');
    test = await TestBroker.open();
    broker = new BrokerConnection({ url: brokerUrl(), name: 'recorder-upkeep-timeout-test', logger: silentLogger() });
    await broker.open();
  });

  afterAll(async () => {
    await broker?.close();
    await test?.deleteTopology(prefix);
    await test?.close();
    await db?.drop();
  });

  it('leads and stores records all the same, leaving what it could not delete to the next upkeep', async () => {
    // Failures 40 days old, each of whose deletes takes 50 ms: 2 s, past the 300 ms timeout.
    await db.query(`INSERT INTO failed_webhooks (merchant_id, webhook_id, failed_at, event, merchant_refs, endpoint_id)
      SELECT 'm_old', 'evt_old_' || n, now() - interval '40 days', 'payout', ARRAY['m_old' || chr(31) || 'PO-' || n], '' FROM generate_series(1, 40) AS n`);
    await db.query(`CREATE FUNCTION slow_delete() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(0.05); RETURN OLD; END $$`);
    await db.query('CREATE TRIGGER slow_delete BEFORE DELETE ON failed_webhooks FOR EACH ROW EXECUTE FUNCTION slow_delete()');
    const writer = new DeliveryRecorder(broker, silentLogger(), { prefix });
    await writer.start();
    const database = openPostgres(db.url, { statementTimeoutMs: 300 });
    const recorder = new DeliveryLogRecorder(broker, database, silentLogger(), { prefix, retentionMs: 30 * 86_400_000, retryMs: 100 });
    try {
      await recorder.start();
      const firstSeenAt = new Date().toISOString();
      await writer.record({
        webhookId: 'evt_upkeep_1', merchantId: 'm_new', event: 'payout', references: ['PO-NEW'], firstSeenAt, outcome: 'delivered', attemptNumber: 1,
        payload: JSON.stringify({ event: 'payout', data: { reference: 'PO-NEW' } }), attempt: { startedAt: firstSeenAt, durationMs: 3, httpStatus: 200 },
      });
      await waitFor('the record stored', async () => (await db.query<{ n: number }>('SELECT count(*)::int AS n FROM delivery_records'))[0]!.n === 1, 15_000, 100);
      expect(recorder.state.leading).toBe(true);
      // The delete timed out whole: the old failures wait for an upkeep that can finish.
      expect(await db.query('SELECT count(*)::int AS n FROM failed_webhooks')).toEqual([{ n: 40 }]);
    } finally {
      await recorder.stop();
      await database.close();
      await writer.stop();
    }
  }, 60_000);
});
