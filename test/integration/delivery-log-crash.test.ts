import { BrokerConnection } from '../../libs/broker/index.js';
import { type DeliveryRecordInput, DeliveryRecorder } from '../../libs/delivery-log/index.js';
import { type Database, deliveryLogQueries, DeliveryLogRecorder, openPostgres } from '../../libs/delivery-store/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { fingerprintAt } from '../../libs/streams/index.js';
import { topologyNames } from '../../libs/topology/index.js';
import { brokerUrl, TestBroker, uniquePrefix } from '../support/broker.js';
import { createTestDatabase } from '../support/postgres.js';
import { PrivatePostgres } from '../support/private-postgres.js';
import { waitFor } from '../support/wait.js';

/**
 * The feed's cursor must survive a PostgreSQL crash. The recorder commits asynchronously, so a
 * crash takes back rows a merchant may already have read; they are stored again from the stream.
 * A cursor from a sequence then went back (each update of a webhook's row used a value too), and
 * the webhooks stored after the crash got positions at or below a cursor already handed out.
 */
describe('the feed read across a PostgreSQL crash (stop -m immediate) under load', () => {
  const prefix = uniquePrefix('delivery-log-crash');
  let server: PrivatePostgres | undefined;
  let test: TestBroker;
  let broker: BrokerConnection;
  let database: Database;
  let reader: Database;
  let running: DeliveryLogRecorder | undefined;

  beforeAll(async () => {
    server = await PrivatePostgres.start();
    test = await TestBroker.open();
    broker = new BrokerConnection({ url: brokerUrl(), name: 'delivery-log-crash-test', logger: silentLogger() });
    await broker.open();
  }, 60_000);

  afterAll(async () => {
    await running?.stop();
    await broker?.close();
    await test?.deleteTopology(prefix);
    await test?.close();
    await database?.close().catch(() => {});
    await reader?.close().catch(() => {});
    await server?.stop();
  });

  it('misses no webhook the log stored, reading after the cursor it was given before the crash', async () => {
    if (!server) {
      console.warn('skipped: no PostgreSQL server binaries (PG_BIN_DIR) to run a private server that can be crashed');
      return;
    }
    database = openPostgres(server.url);
    reader = openPostgres(server.url);
    const writer = new DeliveryRecorder(broker, silentLogger(), { prefix, maxRecords: 20 });
    await writer.start();
    const recorder = new DeliveryLogRecorder(broker, database, silentLogger(), { prefix, retentionMs: 30 * 86_400_000, retryMs: 100, checkpointEveryMs: 60_000 });
    await recorder.start();
    running = recorder;

    // A webhook's three records, a retry apart: each batch updates rows an earlier one inserted.
    // 600 more webhooks after the crash (some 3 s of batches), where up to 1,800 in all went on 8 s after it.
    let webhooks = 1_800;
    const firstSeen = new Map<number, string>();
    const records = (n: number): DeliveryRecordInput[] => {
      if (!firstSeen.has(n)) firstSeen.set(n, new Date().toISOString());
      const firstSeenAt = firstSeen.get(n)!;
      const base = { webhookId: `wh_${n}`, merchantId: 'm_feed', event: 'payout', references: [`po-${n}`], firstSeenAt, payload: JSON.stringify({ event: 'payout', data: { reference: `po-${n}` } }) };
      return [1, 2, 3].map((i) => ({ ...base, outcome: i === 3 ? 'delivered' : 'retrying', attemptNumber: i, attempt: { startedAt: new Date().toISOString(), durationMs: 2, httpStatus: i === 3 ? 200 : 503 } }));
    };
    const seen = new Set<string>();
    let cursor: string | undefined;
    let reading = true;
    const log = deliveryLogQueries(reader);
    const readLoop = (async () => {
      while (reading) {
        try {
          const page = await log.feed('m_feed', cursor, 200);
          for (const event of page.events) seen.add(event.webhookId);
          cursor = page.nextCursor;
        } catch {
          // the server is down: the merchant asks again
        }
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
    })();

    // About 600 records a second: the webhook n's first record, n-20's second, n-40's third.
    let crashed = false;
    const started = Date.now();
    for (let n = 0; n < webhooks + 40; n++) {
      const writes: Array<Promise<void>> = [];
      if (n < webhooks) writes.push(writer.record(records(n)[0]!));
      if (n >= 20 && n - 20 < webhooks) writes.push(writer.record(records(n - 20)[1]!));
      if (n >= 40) writes.push(writer.record(records(n - 40)[2]!));
      await Promise.all(writes);
      if (!crashed && seen.size >= 600) {
        crashed = true;
        await server.crash();
        await server.up();
        webhooks = Math.min(webhooks, n + 1 + 600);
      }
      const due = started + n * 5;
      if (due > Date.now()) await new Promise((resolve) => setTimeout(resolve, due - Date.now()));
    }
    expect(crashed).toBe(true);
    await writer.stop();
    const stored = async () => Number((await reader.query<{ n: string }>(`SELECT count(*) AS n FROM delivery_webhooks WHERE status = 'delivered'`)).rows[0]!.n);
    await waitFor('every webhook stored as delivered', async () => (await stored().catch(() => 0)) === webhooks, 60_000, 100);
    await waitFor('the reader at the end of the feed', () => seen.size >= webhooks, 10_000, 50).catch(() => undefined);
    reading = false;
    await readLoop;
    await recorder.stop();
    const missed = Array.from({ length: webhooks }, (_, n) => `wh_${n}`).filter((id) => !seen.has(id));
    expect(missed).toEqual([]);
  }, 180_000);

  it('gives the webhooks of a commit lost in a crash the same cursors when they are stored again, so a reader past some of them misses none', async () => {
    // What a crash can take back, made by hand on the shared server: the last commits' rows, the
    // offset stored with them and (before this fix) the feed sequence's advance, which PostgreSQL
    // logs ahead of use and may lose with them.
    const db = await createTestDatabase('delivery_log_lost_commit');
    const lossPrefix = `${prefix}.lost`;
    const local = openPostgres(db.url);
    let recorder: DeliveryLogRecorder | undefined;
    try {
      const writer = new DeliveryRecorder(broker, silentLogger(), { prefix: lossPrefix, maxRecords: 1 });
      await writer.start();
      const startRecorder = async () => {
        const recorder = new DeliveryLogRecorder(broker, local, silentLogger(), { prefix: lossPrefix, retentionMs: 30 * 86_400_000, retryMs: 100, checkpointEveryMs: 60_000 });
        await recorder.start();
        return recorder;
      };
      recorder = await startRecorder();
      const firstSeenAt = new Date().toISOString();
      const write = (n: number, attempt: number) =>
        writer.record({ webhookId: `wh_${n}`, merchantId: 'm_lost', event: 'payout', references: [`po-${n}`], firstSeenAt, outcome: attempt === 3 ? 'delivered' : 'retrying',
          attemptNumber: attempt, attempt: { startedAt: new Date().toISOString(), durationMs: 1, httpStatus: attempt === 3 ? 200 : 503 } });
      const stored = async (n: number) => Number((await db.query<{ n: string }>('SELECT count(*) AS n FROM delivery_records').catch(() => [{ n: '0' }]))[0]!.n) >= n;
      // Live, one record a statement: 20 webhooks, each row updated twice after its insert.
      for (let n = 0; n < 20; n++) {
        for (let a = 1; a <= 3; a++) {
          await write(n, a);
          await waitFor('stored', () => stored(n * 3 + a), 10_000, 5);
        }
      }
      const log = deliveryLogQueries(local);
      const before = await log.feed('m_lost', undefined, 100);
      expect(before.events).toHaveLength(20);
      // The reader has read the first 15 webhooks.
      const cursor = before.events[14]!.cursor;
      await recorder.stop();

      // The crash takes back the last 10 webhooks' rows and records, and the offset goes with them.
      const lost = before.events.slice(10).map((e) => e.webhookId);
      await db.query('DELETE FROM delivery_webhooks WHERE webhook_id = ANY($1)', [lost]);
      await db.query('DELETE FROM delivery_records WHERE webhook_id = ANY($1)', [lost]);
      // With the offset, what the commit before stored: the fingerprint of the entry before it.
      const stream = topologyNames(lossPrefix).deliveries;
      await db.query('UPDATE delivery_log_offsets SET next_offset = 30, last_entry = $2 WHERE stream = $1', [stream, await fingerprintAt(broker, stream, 29, 5_000)]);
      const sequence = await db.query<{ n: string }>(`SELECT count(*) AS n FROM pg_class WHERE relname = 'delivery_feed_seq'`);
      if (sequence[0]!.n !== '0') await db.query(`SELECT setval('delivery_feed_seq', (SELECT max(seq) FROM delivery_webhooks))`);

      // Stored again in one catch-up batch: the reader, after its cursor, gets every webhook it had not read.
      recorder = await startRecorder();
      await waitFor('stored again', () => stored(60), 20_000, 20);
      const after = await log.feed('m_lost', cursor, 100);
      expect(after.events.map((e) => e.webhookId)).toEqual(before.events.slice(15).map((e) => e.webhookId));
      expect((await log.feed('m_lost', undefined, 100)).events.map((e) => e.cursor)).toEqual(before.events.map((e) => e.cursor));
      await recorder.stop();
      await writer.stop();
    } finally {
      await recorder?.stop();
      await local.close();
      await test.deleteTopology(lossPrefix);
      await db.drop();
    }
  }, 60_000);
});
