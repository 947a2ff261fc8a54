/**
 * Waits handed back on time (issue 54: p99 of sent − due ≤ 1 s with 100,000 waits spread over the
 * schedule). `count` waits (webhook_waits rows with their bodies) are inserted into a migrated bench
 * database, due evenly over `seconds` from a few seconds after the insert; one WaitScheduler (as a
 * dispatcher makes it) hands them back to a bench topology's dispatch queue, which this process
 * consumes. Lateness is receipt (Date.now() at the consumer) less due_at, each wait's due time
 * carried in its headers as PostgreSQL computed it: both clocks are this one machine's (PostgreSQL
 * runs on it), so they compare. No POST: this measures the hand-back alone.
 *
 * `npm run bench -- waits-on-time` (BENCH_WAITS, default 100,000; BENCH_WAITS_SECONDS, default 60;
 * BENCH_WAITS_TOTAL, the waits in the table, default BENCH_WAITS: those beyond it due over the day after the window).
 */
import amqp from 'amqplib';
import { BrokerConnection } from '../libs/broker/index.js';
import { openPostgres } from '../libs/delivery-store/index.js';
import { silentLogger } from '../libs/logger/index.js';
import { declareIntake, topologyNames } from '../libs/topology/index.js';
import { WaitScheduler, WaitStore } from '../libs/waits/index.js';
import { benchPrefix, deleteTopology, eventBody, withDatabase } from './fixtures.js';
import { median, percentile, round } from './stats.js';

export interface WaitsOnTimeResult {
  /** Receipt − due, ms, over every wait. */
  p50: number;
  p99: number;
  max: number;
  /** Waits received (of count), and hand-backs received again (none expected: the lease outlasts the run). */
  received: number;
  again: number;
  /** The pick statement's duration as the scheduler saw it, ms, and picks made. */
  pickP50Ms: number;
  pickP99Ms: number;
  picks: number;
  insertS: number;
}

const LEAD_S = 15;

/** `filler`: more waits in the table, due after the window (the rest of a schedule's waits). */
export function benchWaitsOnTime(url: string, count: number, seconds: number, filler = 0): Promise<WaitsOnTimeResult> {
  return withDatabase('waits_on_time', (databaseUrl) => run(url, count, seconds, databaseUrl, filler));
}

async function run(url: string, count: number, seconds: number, databaseUrl: string, filler: number): Promise<WaitsOnTimeResult> {
  const prefix = benchPrefix('waits-on-time');
  const { dispatch } = topologyNames(prefix);
  const database = openPostgres(databaseUrl, { statementTimeoutMs: 600_000, maxConnections: 4 });
  const broker = new BrokerConnection({ url, name: 'bench-waits-on-time', logger: silentLogger() });
  const connection = await amqp.connect(url);
  let scheduler: WaitScheduler | undefined;
  try {
    await broker.open();
    const setup = await broker.createChannel();
    await declareIntake(setup, prefix);
    await setup.close();
    // The other waits of the schedule (BENCH_WAITS_TOTAL less those measured), due over the day after
    // the window: rows the pick's index holds and must not read. Inserted first, untimed.
    if (filler > 0) {
      await database.query(
        `WITH w AS (SELECT 'wh_later_' || i AS webhook_id, now() + ($2::float8 + 600 + (i::float8 / $1) * 86400) * interval '1 second' AS due_at FROM generate_series(0, $1 - 1) AS i),
         bodies AS (INSERT INTO webhook_bodies (merchant_id, webhook_id, content) SELECT 'm_later', webhook_id, decode($3, 'hex') FROM w)
         INSERT INTO webhook_waits (merchant_id, webhook_id, attempt, due_at, pick_at, reason, headers)
         SELECT 'm_later', webhook_id, 1, due_at, due_at, 'retry', '{}'::jsonb FROM w`,
        [filler, LEAD_S + seconds, eventBody('m_later').toString('hex')],
      );
    }
    // Due evenly over `seconds`, the first LEAD_S after the statement's now(): the insert commits
    // before the first is due. The due time rides in the headers, as PostgreSQL's clock says it.
    const started = Date.now();
    const body = eventBody('m_bench').toString('hex');
    await database.query(
      `WITH w AS (
         SELECT 'wh_' || i AS webhook_id, now() + ($3::float8 + (i::float8 / $1) * $2) * interval '1 second' AS due_at
         FROM generate_series(0, $1 - 1) AS i
       ), bodies AS (
         INSERT INTO webhook_bodies (merchant_id, webhook_id, content) SELECT 'm_bench', webhook_id, decode($4, 'hex') FROM w
       )
       INSERT INTO webhook_waits (merchant_id, webhook_id, attempt, due_at, pick_at, reason, headers)
       SELECT 'm_bench', webhook_id, 1, due_at, due_at, 'retry', jsonb_build_object('x-bench-due', extract(epoch FROM due_at) * 1000) FROM w`,
      [count, seconds, LEAD_S, body],
    );
    const insertS = (Date.now() - started) / 1000;
    await database.query('ANALYZE webhook_waits');
    if (insertS > LEAD_S - 2) throw new Error(`the insert took ${insertS} s, past the first due time`);

    const late: number[] = [];
    const seen = new Set<string>();
    let again = 0;
    let done!: () => void;
    const all = new Promise<void>((resolve) => (done = resolve));
    const channel = await connection.createChannel();
    await channel.prefetch(2_000);
    await channel.consume(dispatch, (message) => {
      if (!message) return;
      const now = Date.now();
      if (seen.has(message.properties.messageId)) again++;
      else {
        seen.add(message.properties.messageId);
        late.push(now - Number(message.properties.headers?.['x-bench-due']));
      }
      channel.ack(message);
      if (late.length >= count) done();
    });
    const store = new WaitStore(database);
    const picks: number[] = [];
    const pick = store.pick.bind(store);
    store.pick = async (limit, leaseMs) => {
      const t = performance.now();
      try {
        return await pick(limit, leaseMs);
      } finally {
        picks.push(performance.now() - t);
      }
    };
    scheduler = new WaitScheduler(store, broker, silentLogger(), { dispatch, leaseMs: 3_600_000 });
    scheduler.start();
    const deadline = setTimeout(done, (LEAD_S + seconds + 120) * 1000);
    await all;
    clearTimeout(deadline);
    late.sort((a, b) => a - b);
    return { p50: round(percentile(late, 50) / 1000), p99: round(percentile(late, 99) / 1000), max: round(late.at(-1)! / 1000), received: late.length, again, pickP50Ms: round(median(picks), 1), pickP99Ms: round(percentile(picks.sort((a, b) => a - b), 99), 1), picks: picks.length, insertS: round(insertS, 1) };
  } finally {
    await scheduler?.stop();
    await connection.close().catch(() => {});
    await broker.close();
    await database.close();
    await deleteTopology(url, prefix);
  }
}

/** The section of BENCHMARKS.md; `runs` runs, each figure their median. */
export async function waitsOnTimeSection(url: string, runs: number, log: (line: string) => void): Promise<string> {
  const count = Number(process.env.BENCH_WAITS ?? 100_000);
  const seconds = Number(process.env.BENCH_WAITS_SECONDS ?? 60);
  const total = Math.max(count, Number(process.env.BENCH_WAITS_TOTAL ?? count));
  const results: WaitsOnTimeResult[] = [];
  for (let i = 0; i < runs; i++) {
    results.push(await benchWaitsOnTime(url, count, seconds, total - count));
    log(`waits-on-time run ${i + 1}/${runs}: ${JSON.stringify(results.at(-1))}`);
  }
  const mid = (key: keyof WaitsOnTimeResult) => percentile(results.map((r) => r[key]).sort((a, b) => a - b), 50);
  return `## 17. Waits handed back on time (issue 54)

${count.toLocaleString('en')} waits due evenly over ${seconds} s (of ${total.toLocaleString('en')} in the table, the rest due over the day after), one WaitScheduler handing them back to dispatch, this process
consuming (no POST). Lateness = receipt − due_at, both on this machine's clock (PostgreSQL runs on it). Median of ${runs} run(s):
p50 **${mid('p50')} s**, p99 **${mid('p99')} s**, max ${mid('max')} s (${mid('received').toLocaleString('en')} received, ${mid('again')} twice); the pick statement took
p50 ${mid('pickP50Ms')} ms, p99 ${mid('pickP99Ms')} ms (${mid('picks')} picks). Target: p99 ≤ 1 s.
`;
}
