/** The delivery log's benchmarks, each on a database of its own (withDatabase). */
import { randomBytes, randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import pg from 'pg';
import { BrokerConnection } from '../libs/broker/index.js';
import { type DeliveryRecordInput, DeliveryRecorder } from '../libs/delivery-log/index.js';
import { type Database, DeliveryLogRecorder, deliveryLogQueries, openPostgres, type Session } from '../libs/delivery-store/index.js';
import { ensurePartition } from '../libs/delivery-store/schema.js';
import { silentLogger } from '../libs/logger/index.js';
import { topologyNames } from '../libs/topology/index.js';
import { withDatabase } from './fixtures.js';
import { startProgram, until } from './processes.js';
import { percentile } from './stats.js';

/**
 * The n-th record: webhook n >> 2's attempt (n % 4) + 1, so four records per webhook, all with
 * the webhook's merchant and first-seen time, as the dispatcher writes them.
 */
function record(n: number, firstSeenAt: string): DeliveryRecordInput {
  const now = new Date().toISOString();
  return {
    webhookId: `wh_${n >> 2}`,
    merchantId: `m_${(n >> 2) % 100}`,
    event: 'charge.completed',
    references: [`tx_${n >> 2}`],
    payload: { event: 'charge.completed', data: { tnxRef: `tx_${n >> 2}`, amount: 1000, currency: 'NGN', status: 'successful' } },
    firstSeenAt,
    outcome: n % 4 === 3 ? 'delivered' : 'retrying',
    attemptNumber: (n % 4) + 1,
    attempt: { startedAt: now, durationMs: 12, httpStatus: n % 4 === 3 ? 200 : 503, responseBody: 'Service Unavailable' },
  };
}

/** `total` records on the deliveries stream through the dispatcher's writer, four per webhook, 5,000 in flight. */
async function fillDeliveries(broker: BrokerConnection, prefix: string, total: number, make: (n: number, firstSeenAt: string) => DeliveryRecordInput): Promise<void> {
  const writer = new DeliveryRecorder(broker, silentLogger(), { prefix });
  await writer.start();
  const inFlight: Array<Promise<void>> = [];
  let firstSeenAt = '';
  for (let n = 0; n < total; n++) {
    if (n % 4 === 0) firstSeenAt = new Date().toISOString();
    inFlight.push(writer.record(make(n, firstSeenAt)));
    if (inFlight.length >= 5_000) await Promise.all(inFlight.splice(0));
  }
  await Promise.all(inFlight);
  await writer.stop();
}

/**
 * Recorder throughput: N records already on the stream (as after an outage, the worst case), then
 * the time the recorder takes to store them all, offset included.
 */
export async function recorderThroughput(url: string, total: number): Promise<{ recordsPerSecond: number; seconds: number }> {
  const prefix = `bench.recorder.${randomBytes(3).toString('hex')}`;
  const broker = new BrokerConnection({ url, name: 'bench-recorder', logger: silentLogger() });
  await broker.open();
  try {
    await fillDeliveries(broker, prefix, total, record);
    return await withDatabase('recorder', async (dbUrl) => {
      const database = openPostgres(dbUrl);
      const recorder = new DeliveryLogRecorder(broker, database, silentLogger(), { prefix, retentionMs: 30 * 86_400_000 });
      const started = performance.now();
      await recorder.start();
      while (recorder.state.recordsStored < total) await new Promise((resolve) => setTimeout(resolve, 20));
      const seconds = (performance.now() - started) / 1000;
      await recorder.stop();
      await database.close();
      return { recordsPerSecond: Math.round(total / seconds), seconds: Math.round(seconds * 10) / 10 };
    });
  } finally {
    const ch = await broker.createChannel();
    await ch.deleteQueue(topologyNames(prefix).deliveries).catch(() => {});
    await ch.close().catch(() => {});
    await broker.close();
  }
}

/** 4 attempts per webhook, 1,000 merchants, first seen at times spread over the last 7 days. */
async function load(session: Session, webhooks: number): Promise<void> {
  await session.query(
    `INSERT INTO delivery_webhooks (merchant_id, webhook_id, first_seen_at, seq, event, refs, merchant_refs, payload, status, attempts,
       first_attempt_at, last_attempt_at, last_http_status, last_record_at)
     SELECT 'm_' || (g % 1000), 'wh_' || g, now() - ((g::bigint * 7919) % 604800) * interval '1 second', g, 'charge.completed',
       ARRAY['tx_' || g], ARRAY['m_' || (g % 1000) || chr(31) || 'tx_' || g], jsonb_build_object('event', 'charge.completed', 'data', jsonb_build_object('tnxRef', 'tx_' || g, 'amount', 1000)),
       CASE WHEN g % 50 = 0 THEN 'failed' ELSE 'delivered' END, 4, now() - ((g::bigint * 7919) % 604800) * interval '1 second', now() - ((g::bigint * 7919) % 604800) * interval '1 second' + interval '40 seconds',
       200, now() - ((g::bigint * 7919) % 604800) * interval '1 second' + interval '40 seconds'
     FROM generate_series(1, $1::integer) g`,
    [webhooks],
  );
  await session.query(
    `INSERT INTO delivery_records (id, at, merchant_id, webhook_id, outcome, attempt_number, started_at, duration_ms, http_status, response_body)
     SELECT gen_random_uuid(), w.first_seen_at + a * interval '10 seconds', w.merchant_id, w.webhook_id,
       CASE WHEN a = 4 THEN 'delivered' ELSE 'retrying' END, a, w.first_seen_at + a * interval '10 seconds', 12,
       CASE WHEN a = 4 THEN 200 ELSE 503 END, 'Service Unavailable'
     FROM delivery_webhooks w, generate_series(1, 4) a`,
  );
  // As autovacuum leaves a day's partition once it is written (hint bits set, GIN pending lists
  // merged), and so that it does not start on 4 GB in the middle of the measurement.
  await session.query('VACUUM (ANALYZE)');
}

/**
 * The two queries merchants and support run most, against `attempts` rows made with
 * generate_series. With `keep`, the database of that name is filled once and reused by later runs
 * (the load takes minutes at 10,000,000 attempts) and left for the caller to drop.
 */
export async function logQueries(
  attempts: number,
  samples: number,
  keep?: string,
): Promise<{
  latest50P50: number;
  latest50P99: number;
  failed50P50: number;
  failed50P99: number;
  referenceP50: number;
  referenceP99: number;
  detailByIdP50: number;
  detailByIdP99: number;
  loadSeconds: number;
}> {
  return withDatabase('queries', async (dbUrl) => {
    const database: Database = openPostgres(dbUrl, { statementTimeoutMs: 3_600_000 });
    try {
      const session = await database.session();
      const today = Date.now();
      for (let d = -8; d <= 1; d++) {
        const day = new Date(today + d * 86_400_000).toISOString().slice(0, 10);
        await ensurePartition(session, 'delivery_records', day);
      }
      const webhooks = Math.floor(attempts / 4);
      const loadStarted = performance.now();
      await session.query('CREATE TABLE IF NOT EXISTS bench_dataset (webhooks integer NOT NULL)');
      const made = (await session.query<{ webhooks: number }>('SELECT webhooks FROM bench_dataset')).rows[0];
      if (made && made.webhooks !== webhooks) throw new Error(`${keep} holds ${made.webhooks} webhooks, not ${webhooks}: drop it first`);
      if (!made) {
        await load(session, webhooks);
        await session.query('INSERT INTO bench_dataset VALUES ($1)', [webhooks]);
      }
      const loadSeconds = made ? 0 : Math.round((performance.now() - loadStarted) / 1000);
      await session.close();

      const log = deliveryLogQueries(database);
      const latest: number[] = [];
      const latestFailed: number[] = [];
      const byReference: number[] = [];
      const byId: number[] = [];
      for (let i = 0; i < samples; i++) {
        const g = 1 + Math.floor(Math.random() * webhooks);
        const merchant = `m_${g % 1000}`;
        let t = performance.now();
        await log.listWebhooks(merchant, { limit: 50 });
        latest.push(performance.now() - t);
        // One webhook in 50 failed: the status filter's index reads the page and stops.
        t = performance.now();
        await log.listWebhooks(merchant, { limit: 50, status: 'failed' });
        latestFailed.push(performance.now() - t);
        t = performance.now();
        const found = await log.listWebhookDetails(merchant, { reference: `tx_${g}`, limit: 50 });
        byReference.push(performance.now() - t);
        if (found.webhooks.length !== 1 || found.webhooks[0]!.records.length !== 4) throw new Error(`reference tx_${g} not found with its 4 attempts`);
        // Another webhook's, so that the reference query just before has not read its pages.
        const other = 1 + Math.floor(Math.random() * webhooks);
        t = performance.now();
        const alone = await log.getWebhook(`m_${other % 1000}`, `wh_${other}`);
        byId.push(performance.now() - t);
        if (alone?.records.length !== 4) throw new Error(`wh_${other} not found with its 4 attempts`);
      }
      const ms = (values: number[], p: number) => Math.round(percentile(values.sort((a, b) => a - b), p) * 100) / 100;
      return {
        latest50P50: ms(latest, 50),
        latest50P99: ms(latest, 99),
        failed50P50: ms(latestFailed, 50),
        failed50P99: ms(latestFailed, 99),
        referenceP50: ms(byReference, 50),
        referenceP99: ms(byReference, 99),
        detailByIdP50: ms(byId, 50),
        detailByIdP99: ms(byId, 99),
        loadSeconds,
      };
    } finally {
      await database.close();
    }
  }, keep);
}

/**
 * A catch-up after an outage: `total` records (1 KB payloads and response bodies, as merchants'
 * webhooks are) already on the stream, then the recorder as deployed (its own process) storing
 * them all. Its peak resident memory (VmHWM) is what the bound on bytes read ahead is for.
 */
export async function recorderCatchUp(url: string, total: number): Promise<{ recordsPerSecond: number; seconds: number; peakRssMb: number; streamMb: number }> {
  const prefix = `bench.catchup.${randomBytes(3).toString('hex')}`;
  const broker = new BrokerConnection({ url, name: 'bench-catchup', logger: silentLogger() });
  await broker.open();
  try {
    const filler = 'x'.repeat(900);
    const make = (n: number, firstSeenAt: string) => {
      const r = record(n, firstSeenAt);
      r.payload = { event: 'charge.completed', data: { tnxRef: `tx_${n >> 2}`, amount: 1000, currency: 'NGN', narration: filler } };
      r.attempt!.responseBody = filler.slice(0, 512);
      return r;
    };
    const sample = { ...make(0, new Date().toISOString()), id: randomUUID(), at: new Date().toISOString() };
    await fillDeliveries(broker, prefix, total, make);
    const streamBytes = total * Buffer.byteLength(JSON.stringify(sample));
    return await withDatabase('catchup', async (dbUrl) => {
      const db = new pg.Client({ connectionString: dbUrl });
      await db.connect();
      const started = performance.now();
      const recorder = startProgram('recorder/main.js', { RABBITMQ_URL: url, TOPOLOGY_PREFIX: prefix, DATABASE_URL: dbUrl, LOG_LEVEL: 'error' });
      try {
        const stored = async () => {
          try {
            return Number((await db.query<{ n: string }>('SELECT count(*) AS n FROM delivery_records')).rows[0]!.n);
          } catch {
            return 0;
          }
        };
        await until('every record stored', async () => (await stored()) >= total, 1_800_000, 500);
        const seconds = (performance.now() - started) / 1000;
        const peakRssMb = peakRss(recorder.child.pid);
        return { recordsPerSecond: Math.round(total / seconds), seconds: Math.round(seconds), peakRssMb, streamMb: Math.round(streamBytes / 1024 / 1024) };
      } finally {
        await recorder.stop();
        await db.end();
      }
    });
  } finally {
    const ch = await broker.createChannel();
    await ch.deleteQueue(topologyNames(prefix).deliveries).catch(() => {});
    await ch.close().catch(() => {});
    await broker.close();
  }
}

function peakRss(pid: number | undefined): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  return Math.round(Number(/VmHWM:\s+(\d+) kB/.exec(status)?.[1] ?? 0) / 1024);
}
