/**
 * The delivery log's cost to deliveries: dispatch with the log on against off, and a PostgreSQL
 * outage under a steady load (deliveries must not slow; the log must be exact after).
 */
import pg from 'pg';
import { withDatabase } from './fixtures.js';
import { benchPrefix } from './fixtures.js';
import { PgProxy } from './pg-proxy.js';
import { type ReceiverProcess, startProgram, until } from './processes.js';
import { steadyRun } from './steady.js';
import { dispatcherCpu } from './throughput.js';

/**
 * One round: the dispatcher with DELIVERY_LOG on and off, in the order given, same events and
 * receiver; measured over `total` deliveries after `warmup` (see dispatcherCpu).
 */
export async function logOverheadRound(url: string, receiver: ReceiverProcess, warmup: number, total: number, concurrency: number, onFirst: boolean) {
  const run = async (log: 'on' | 'off') => (await dispatcherCpu(url, receiver, warmup, total, concurrency, { DELIVERY_LOG: log })).warm;
  const first = await run(onFirst ? 'on' : 'off');
  const second = await run(onFirst ? 'off' : 'on');
  const [on, off] = onFirst ? [first, second] : [second, first];
  return { onRate: on.rate, offRate: off.rate, onCpuUs: on.cpuUs, offCpuUs: off.cpuUs, rateRatio: on.rate / off.rate, cpuRatio: on.cpuUs / off.cpuUs };
}

/**
 * `rate` events/s through the events exchange with the dispatcher and the recorder running;
 * PostgreSQL (behind a proxy, so the shared one keeps running) is stopped after `beforeS` for
 * `outageS`, then the load goes on `afterS`. Latency per phase (by the merchant each event was
 * sent to), the seconds the log took to hold every webhook after PostgreSQL came back, and
 * whether it is exact (each webhook once, each record once).
 */
export async function logOutage(url: string, receiver: ReceiverProcess, options: { rate: number; beforeS: number; outageS: number; afterS: number }) {
  const { rate, beforeS, outageS, afterS } = options;
  return withDatabase('outage', async (dbUrl) => {
    const proxy = await PgProxy.start(dbUrl);
    const prefix = benchPrefix('outage');
    const recorder = startProgram('recorder/main.js', { RABBITMQ_URL: url, TOPOLOGY_PREFIX: prefix, DATABASE_URL: proxy.urlFor(dbUrl), LOG_LEVEL: 'warn' });
    const db = new pg.Client({ connectionString: dbUrl });
    await db.connect();
    let ended = false;
    try {
      const phaseOf = (i: number) => {
        const second = i / rate - 1; // the first second is the untimed warm-up
        return second < beforeS ? 'm_before' : second < beforeS + outageS ? 'm_during' : 'm_after';
      };
      let upAt = 0;
      let complete = 0;
      /** When the log held every webhook sent up to PostgreSQL's return (the outage's backlog). */
      let backlogStored = 0;
      const backlog = rate * (1 + beforeS + outageS);
      const watchBacklog = async () => {
        while (backlogStored === 0 && !ended) {
          const { rows } = await db
            .query<{ n: string }>(`SELECT count(*) AS n FROM delivery_webhooks WHERE status = 'delivered' AND merchant_id IN ('m_before', 'm_during')`)
            .catch(() => ({ rows: [] as Array<{ n: string }> }));
          if (Number(rows[0]?.n ?? 0) >= backlog) backlogStored = performance.now();
          else await new Promise((resolve) => setTimeout(resolve, 250));
        }
      };
      let watching: Promise<void> | undefined;
      let exact = { webhooks: 0, records: 0, notOnce: 0 };
      const total = rate * (1 + beforeS + outageS + afterS);
      const latency = await steadyRun({
        url,
        rate,
        seconds: beforeS + outageS + afterS,
        prefix,
        merchants: ['m_before', 'm_during', 'm_after'].map((id) => ({ id, url: `${receiver.url}/ok` })),
        merchantOf: phaseOf,
        receivers: [receiver],
        expectDelivered: () => true,
        env: { DELIVERY_LOG: 'on' },
        at: [
          { second: beforeS, run: () => proxy.down() },
          {
            second: beforeS + outageS,
            run: () =>
              proxy.up().then(() => {
                upAt = performance.now();
                watching = watchBacklog();
              }),
          },
        ],
        afterDelivered: async () => {
          await until(
            'the delivery log complete',
            async () => {
              const { rows } = await db.query<{ webhooks: string; records: string; not_once: string }>(
                `SELECT (SELECT count(*) FROM delivery_webhooks WHERE status = 'delivered') AS webhooks,
                        (SELECT count(*) FROM delivery_records) AS records,
                        (SELECT count(*) FROM delivery_webhooks WHERE attempts <> 1) AS not_once`,
              ).catch(() => ({ rows: [] }));
              const row = rows[0];
              if (!row) return false;
              exact = { webhooks: Number(row.webhooks), records: Number(row.records), notOnce: Number(row.not_once) };
              return exact.webhooks >= total;
            },
            600_000,
            250,
          );
          complete = performance.now();
          await watching;
        },
      });
      if (recorder.child.exitCode !== null) throw new Error(`bench: the recorder exited during the outage:\n${recorder.output().slice(-2000)}`);
      return {
        beforeP50: latency.m_before!.p50,
        beforeP99: latency.m_before!.p99,
        duringP50: latency.m_during!.p50,
        duringP99: latency.m_during!.p99,
        afterP50: latency.m_after!.p50,
        afterP99: latency.m_after!.p99,
        /** The target's figure: the webhooks of before and during the outage all in the log. */
        catchUpSeconds: Math.round((backlogStored - upAt) / 100) / 10,
        /** Every webhook of the run, which cannot be before the run's last `afterS` seconds have been sent. */
        allStoredSeconds: Math.round((complete - upAt) / 100) / 10,
        webhooks: exact.webhooks,
        expected: total,
        records: exact.records,
        /** Webhooks whose log does not say exactly one attempt (each was POSTed once). */
        notOnce: exact.notOnce,
      };
    } finally {
      ended = true;
      await recorder.stop();
      await db.end();
      await proxy.down();
    }
  });
}
