/**
 * Issue 54: what retries as rows cost. One dispatcher as deployed (a retry schedule, so its waits in
 * a migrated database of its own) delivers one merchant's events, its receiver answering 204 to all
 * of them (`/ok`), then 500 to a tenth of first attempts and 204 to their retry (`/fail-first`).
 * Rate: successful deliveries a second over a warm window of them. And what PostgreSQL wrote: the
 * bench database's rows (pg_stat_database) and the server's WAL (pg_current_wal_lsn()) from before
 * the dispatcher starts to after it stopped, per delivery and per wait.
 *
 * `dispatch` is kept under 10,000 ready messages (topped up by a feeder) rather than filled up front:
 * above WAIT_MAX_READY the scheduler hands no wait back (a backlog waits in rows), so with a full
 * queue the retries would all come after the window and the rate would not include them.
 */
import amqp from 'amqplib';
import pg from 'pg';
import { intakeSpec, topologyNames } from '../libs/topology/index.js';
import { benchPrefix, deleteTopology, eventBody, withDatabase } from './fixtures.js';
import { freePort, type ReceiverProcess, until } from './processes.js';
import { median, round } from './stats.js';
import { cpuWindows, startBenchDispatcher } from './throughput.js';

/** Ready messages in dispatch under which the feeder adds a batch: below the scheduler's 10,000. */
const LOW_WATER = 5_000;
const BATCH = 2_500;
/** The retry schedule of both variants: one short wait, so retries come back within the run. */
const SCHEDULE = '1s';

interface PgWrites {
  rows: number;
  walBytes: number;
  /** Of walBytes: the records that touch a block of the bench's database (pg_walinspect), commit records not included. */
  ownWalBytes: number;
  waitRows: number;
  bodyRows: number;
  waits: number;
}

export interface RetriesVariant {
  rate: number;
  cpuUs: number;
  delivered: number;
  /** The 500s the receiver answered (each one wait). */
  failed: number;
  pg: PgWrites;
  /** Server-wide WAL a second in the 5 s before the run, the dispatcher not started: the others' share of the WAL figure. */
  quietWalPerSecond: number;
  /** The dispatcher's outcomes that wrote a wait, from its /metrics: retried (a failed attempt), deferred (endpoint busy), circuit_open. */
  waitsBy: { retried: number; deferred: number; circuitOpen: number };
}

/** webhooks_deliveries_total summed by outcome, from a dispatcher's /metrics (empty when it cannot be read). */
async function outcomes(port: number): Promise<Record<string, number>> {
  const text = await fetch(`http://127.0.0.1:${port}/metrics`).then((res) => res.text(), () => '');
  const by: Record<string, number> = {};
  for (const line of text.split('\n')) {
    const outcome = /^webhooks_deliveries_total\{[^}]*outcome="([a-z_]+)"/.exec(line)?.[1];
    if (outcome) by[outcome] = (by[outcome] ?? 0) + Number(line.split(' ').at(-1));
  }
  return by;
}

/** What one database (and the server's WAL) has written: read before and after, subtracted. */
async function pgCounters(client: pg.Client) {
  const { rows } = await client.query<{ rows: string; lsn: string; wait_rows: string; waits: string; body_rows: string }>(`
    SELECT (SELECT tup_inserted + tup_updated + tup_deleted FROM pg_stat_database WHERE datname = current_database()) AS rows,
           pg_current_wal_lsn()::text AS lsn,
           coalesce((SELECT n_tup_ins + n_tup_upd + n_tup_del FROM pg_stat_user_tables WHERE relname = 'webhook_waits'), 0) AS wait_rows,
           coalesce((SELECT n_tup_ins FROM pg_stat_user_tables WHERE relname = 'webhook_waits'), 0) AS waits,
           coalesce((SELECT n_tup_ins + n_tup_upd + n_tup_del FROM pg_stat_user_tables WHERE relname = 'webhook_bodies'), 0) AS body_rows`);
  return rows[0]!;
}

/**
 * WAL records between two LSNs that touch a block of this database (its OID in their block
 * references); NaN when the server has already recycled those segments (others writing fast).
 */
async function ownWal(client: pg.Client, from: string, to: string): Promise<number> {
  const read = client.query<{ n: string }>(
    `SELECT coalesce(sum(record_length), 0) AS n FROM pg_get_wal_records_info($1, $2)
      WHERE block_ref ~ (' rel [0-9]+/' || (SELECT oid FROM pg_database WHERE datname = current_database()) || '/')`,
    [from, to],
  );
  return read.then(({ rows }) => Number(rows[0]!.n), () => NaN);
}

async function walSince(client: pg.Client, lsn: string): Promise<number> {
  return Number((await client.query<{ n: string }>('SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1) AS n', [lsn])).rows[0]!.n);
}

/**
 * Publishes events into dispatch whenever fewer than LOW_WATER are ready, until `enough()`; returns
 * how many it published.
 */
async function feed(url: string, prefix: string, enough: () => boolean): Promise<number> {
  const connection = await amqp.connect(url);
  const channel = await connection.createConfirmChannel();
  const { dispatch } = topologyNames(prefix);
  await channel.assertQueue(dispatch, { durable: true, arguments: { ...intakeSpec(prefix).queue.arguments } });
  let published = 0;
  try {
    while (!enough()) {
      if ((await channel.checkQueue(dispatch)).messageCount >= LOW_WATER) {
        await new Promise((resolve) => setTimeout(resolve, 10));
        continue;
      }
      for (let i = 0; i < BATCH; i++) {
        if (!channel.sendToQueue(dispatch, eventBody('m_bench'), { persistent: true, messageId: `evt_${published++}`, contentType: 'application/json' })) {
          await new Promise((resolve) => channel.once('drain', resolve));
        }
      }
      await channel.waitForConfirms();
    }
  } finally {
    await connection.close();
  }
  return published;
}

async function variant(url: string, receiver: ReceiverProcess, warmup: number, total: number, concurrency: number, path: '/ok' | '/fail-first'): Promise<RetriesVariant> {
  return withDatabase('retries', async (databaseUrl) => {
    const prefix = benchPrefix('retries');
    const client = new pg.Client({ connectionString: databaseUrl });
    await client.connect();
    try {
      // Reads the WAL's records (PostgreSQL 15's contrib), to tell this database's from the others' on the shared server.
      await client.query('CREATE EXTENSION IF NOT EXISTS pg_walinspect');
      await receiver.reset();
      // The others' WAL over a quiet 5 s, before anything of this run writes.
      const quiet = await pgCounters(client);
      await new Promise((resolve) => setTimeout(resolve, 5_000));
      const quietWalPerSecond = (await walSince(client, quiet.lsn)) / 5;
      const before = await pgCounters(client);
      let windowDone = false;
      // The feeder starts first: the dispatcher finds a queue to consume.
      const feeding = feed(url, prefix, () => windowDone);
      const metricsPort = await freePort();
      const program = await startBenchDispatcher(url, prefix, receiver, concurrency, databaseUrl, {
        METRICS_PORT: String(metricsPort),
        RETRY_SCHEDULE: SCHEDULE,
      }, undefined, [{ id: 'm_bench', url: `${receiver.url}${path}` }]);
      let published = 0;
      let by: Record<string, number> = {};
      let windows: Awaited<ReturnType<typeof cpuWindows>>;
      try {
        windows = await cpuWindows(program.child.pid, receiver, warmup, total);
        windowDone = true;
        published = await feeding;
        // Every webhook delivered (each retry done, each wait ended) before the counters are read.
        await until('every retry', async () => (await receiver.count()).count >= published, 120_000, 50);
        by = await outcomes(metricsPort);
      } finally {
        windowDone = true;
        await feeding.catch(() => 0);
        // Its backends exit, so their statistics are flushed before they are read.
        await program.stop();
      }
      const { failed } = await receiver.count();
      // The statistics of backends that exited reach pg_stat_* within a moment: read until they stop moving.
      let after = await pgCounters(client);
      for (let i = 0; i < 20; i++) {
        await new Promise((resolve) => setTimeout(resolve, 250));
        const again = await pgCounters(client);
        if (again.rows === after.rows) break;
        after = again;
      }
      return {
        rate: windows.warm.rate,
        cpuUs: windows.warm.cpuUs,
        delivered: published,
        failed,
        quietWalPerSecond,
        waitsBy: { retried: by.retried ?? NaN, deferred: by.deferred ?? NaN, circuitOpen: by.circuit_open ?? NaN },
        pg: {
          rows: Number(after.rows) - Number(before.rows),
          walBytes: Number((await client.query<{ n: string }>('SELECT pg_wal_lsn_diff($1, $2) AS n', [after.lsn, before.lsn])).rows[0]!.n),
          ownWalBytes: await ownWal(client, before.lsn, after.lsn),
          waitRows: Number(after.wait_rows) - Number(before.wait_rows),
          bodyRows: Number(after.body_rows) - Number(before.body_rows),
          waits: Number(after.waits) - Number(before.waits),
        },
      };
    } finally {
      await client.end();
      await deleteTopology(url, prefix);
    }
  });
}

export interface RetriesResult {
  warmup: number;
  total: number;
  concurrency: number;
  runs: Array<{ ok: RetriesVariant; failing: RetriesVariant }>;
}

/** `runs` rounds of both variants, alternating which goes first. */
export async function benchRetries(url: string, receiver: ReceiverProcess, runs: number, log: (line: string) => void): Promise<RetriesResult> {
  const warmup = Number(process.env.BENCH_RETRIES_WARMUP ?? 10_000);
  const total = Number(process.env.BENCH_RETRIES_N ?? 20_000);
  const concurrency = 128;
  const result: RetriesResult = { warmup, total, concurrency, runs: [] };
  for (let i = 0; i < runs; i++) {
    const okFirst = i % 2 === 0;
    const first = await variant(url, receiver, warmup, total, concurrency, okFirst ? '/ok' : '/fail-first');
    const second = await variant(url, receiver, warmup, total, concurrency, okFirst ? '/fail-first' : '/ok');
    const round = okFirst ? { ok: first, failing: second } : { ok: second, failing: first };
    log(`retries run ${i + 1}/${runs}: ${JSON.stringify(round)}`);
    result.runs.push(round);
  }
  return result;
}

export function retriesSection(r: RetriesResult): string {
  const m = (f: (x: RetriesResult['runs'][number]) => number, digits = 2) => round(median(r.runs.map(f)), digits);
  const perDelivery = (v: RetriesVariant) => ({ rows: v.pg.rows / v.delivered, wal: v.pg.ownWalBytes / v.delivered });
  const perWait = (v: RetriesVariant) => ({ rows: v.pg.rows / Math.max(1, v.pg.waits), wal: v.pg.ownWalBytes / Math.max(1, v.pg.waits) });
  return `## 17. Retries as rows: their cost to dispatch and to PostgreSQL (issue 54)

\`BENCH_RUNS=${r.runs.length} npm run bench -- retries\` (\`BENCH_RETRIES_WARMUP\`=${r.warmup}, \`BENCH_RETRIES_N\`=${r.total}). One dispatcher as deployed
(its own process, \`DISPATCH_CONCURRENCY=${r.concurrency}\`, delivery log on, \`RETRY_SCHEDULE=${SCHEDULE}\`, a migrated database of its own for its
waits), one merchant, a receiver process answering 204 to every attempt (**all succeed**), then, in the same round, 500 to a tenth
of first attempts and 204 to their retry (**a tenth fail once**). \`dispatch\` is topped up by the bench whenever fewer than
${LOW_WATER.toLocaleString('en')} messages are ready (the scheduler hands no wait back above 10,000 ready: a backlog filled up front would hold every retry
until after the window). Rate: successful deliveries (2xx) a second over the ${r.total.toLocaleString('en')} after the first ${r.warmup.toLocaleString('en')}
(warm, as in 1b), retries included; CPU from /proc over the same window. Rounds alternate which goes first.

| receiver | successful deliveries/s | dispatcher CPU µs per success |
|---|---|---|
| all succeed | ${m((x) => x.ok.rate, 0)} | ${m((x) => x.ok.cpuUs, 0)} |
| a tenth fail once | ${m((x) => x.failing.rate, 0)} | ${m((x) => x.failing.cpuUs, 0)} |

Per round, median: a tenth failing ÷ all succeeding **${m((x) => x.failing.rate / x.ok.rate)}×** (target ≥ 0.9; 1 ÷ 1.1 attempts per success is 0.91).

What PostgreSQL wrote, from before the dispatcher started to after it stopped with every webhook delivered (its start-up
included; the recorder is not running, so no delivery-log rows: those are section 15's): rows inserted, updated and deleted
in the bench's own database (pg_stat_database); WAL bytes from pg_current_wal_lsn(), which is server-wide (the line under the
table is what the server wrote a second in the 5 s before each run with nothing of it started: the other work on the machine), so
"its own WAL" is the records between the two LSNs that touch a block of the bench's database (pg_walinspect's
pg_get_wal_records_info, by the database OID in their block references; commit records carry none and are not counted;
NaN when the server had already recycled the run's WAL segments).
Per wait and per delivery: the run's rows and own WAL ÷ its waits (rows inserted into webhook_waits) or its webhooks.

| receiver | webhooks | waits | rows | of them webhook_waits / webhook_bodies | server WAL MB | its own WAL MB | rows per delivery | own WAL bytes per delivery | rows per wait | own WAL bytes per wait |
|---|---|---|---|---|---|---|---|---|---|---|
| all succeed | ${m((x) => x.ok.delivered, 0)} | ${m((x) => x.ok.pg.waits, 0)} | ${m((x) => x.ok.pg.rows, 0)} | ${m((x) => x.ok.pg.waitRows, 0)} / ${m((x) => x.ok.pg.bodyRows, 0)} | ${m((x) => x.ok.pg.walBytes / 2 ** 20, 1)} | ${m((x) => x.ok.pg.ownWalBytes / 2 ** 20, 2)} | ${m((x) => perDelivery(x.ok).rows, 3)} | ${m((x) => perDelivery(x.ok).wal, 0)} | ${m((x) => perWait(x.ok).rows, 2)} | ${m((x) => perWait(x.ok).wal, 0)} |
| a tenth fail once | ${m((x) => x.failing.delivered, 0)} | ${m((x) => x.failing.pg.waits, 0)} | ${m((x) => x.failing.pg.rows, 0)} | ${m((x) => x.failing.pg.waitRows, 0)} / ${m((x) => x.failing.pg.bodyRows, 0)} | ${m((x) => x.failing.pg.walBytes / 2 ** 20, 1)} | ${m((x) => x.failing.pg.ownWalBytes / 2 ** 20, 2)} | ${m((x) => perDelivery(x.failing).rows, 3)} | ${m((x) => perDelivery(x.failing).wal, 0)} | ${m((x) => perWait(x.failing).rows, 2)} | ${m((x) => perWait(x.failing).wal, 0)} |

Server-wide WAL with nothing of the run started, median: ${m((x) => median([x.ok.quietWalPerSecond, x.failing.quietWalPerSecond]) / 1024, 1)} KB/s (the 500s the receiver answered, a tenth failing:
${m((x) => x.failing.failed, 0)}).

Why the waits were written, from the dispatcher's webhooks_deliveries_total, median: all succeed: retried ${m((x) => x.ok.waitsBy.retried, 0)},
deferred (endpoint busy) ${m((x) => x.ok.waitsBy.deferred, 0)}, circuit open ${m((x) => x.ok.waitsBy.circuitOpen, 0)}; a tenth fail once: retried ${m((x) => x.failing.waitsBy.retried, 0)},
deferred ${m((x) => x.failing.waitsBy.deferred, 0)}, circuit open ${m((x) => x.failing.waitsBy.circuitOpen, 0)}.
`;
}
