/**
 * `npm run bench -- sizing`: what docs/sizing.md says an operator must provision,
 * measured on the programs as deployed (each its own process, merchants in PostgreSQL):
 * - PostgreSQL connections of each program, counted in pg_stat_activity by application_name, at
 *   rest and at their peak under load (webhooks flowing with retries and failures; the API's log
 *   reads from several merchants at once);
 * - disk per webhook: `count` webhooks (95% delivered first time, 4% on their second attempt, 1%
 *   to a dead merchant, failing every attempt) through the dispatcher and the recorder's real path, then the growth of
 *   the database (per table family) and of the `deliveries` and `failed` streams on the broker's disk.
 */
import { once } from 'node:events';
import { readdirSync, statSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { SignJWT } from 'jose';
import pg from 'pg';
import { BrokerConnection } from '../libs/broker/index.js';
import { silentLogger } from '../libs/logger/index.js';
import { SecretBox } from '../libs/merchants/index.js';
import { columnsOf } from '../libs/merchants/rows.js';
import { type Merchant, newEndpointId } from '../libs/merchants/index.js';
import { declareIntake, topologyNames } from '../libs/topology/index.js';
import { benchPrefix, databaseProgramEnv, deleteTopology, eventBody, withDatabase } from './fixtures.js';
import { freePort, type ProgramProcess, scrape, startProgram, until } from './processes.js';

const KEY = randomBytes(32);
const JWT_SECRET = 'bench-sizing-jwt-secret-0123456789abcdef';
/** Where RabbitMQ keeps its streams (RABBITMQ_MNESIA_DIR/stream); BENCH_RABBITMQ_STREAM_DIR overrides. */
const STREAM_DIR = process.env.BENCH_RABBITMQ_STREAM_DIR ?? '/var/lib/rabbitmq/mnesia/rabbit@localhost/stream';

export interface ConnectionCounts {
  rest: number;
  peak: number;
}

export interface SizingResult {
  webhooks: number;
  seconds: number;
  /** Per application_name: connections at rest (after start-up) and at their peak under load. */
  connections: Record<string, ConnectionCounts>;
  /** Growth in bytes, per table family and in all, for `webhooks`. */
  databaseBytes: Record<string, number>;
  /** Growth on the broker's disk of the deliveries and failed streams, in bytes (NaN: not readable here). */
  streamBytes: { deliveries: number; failed: number };
  outcomes: { delivered: number; retried: number; failed: number };
}

/**
 * 99 webhooks in 100 go to a merchant whose endpoint answers 204, except to the first attempt of 4
 * of them (500, then 204 to the retry); 1 in 100 to a dead merchant (always 500). The live
 * merchant's failures are spread among its successes, as a healthy endpoint's are, so its circuit
 * stays closed; the dead one's opens, as it would.
 */
const MERCHANTS = [
  { id: 'm_size_live', path: '/live' },
  { id: 'm_size_dead', path: '/dead' },
] as const;
/** Merchants that only read their log: one merchant's reads hold at most 2 connections. */
const READERS = Array.from({ length: 7 }, (_, i) => `m_size_reader_${i}`);
const merchantOf = (i: number) => (i % 100 === 99 ? MERCHANTS[1].id : MERCHANTS[0].id);
const failsFirst = (i: number) => i % 100 >= 95 && i % 100 < 99;

export async function benchSizing(url: string, count: number): Promise<SizingResult> {
  const receiver = await startFlakyReceiver();
  try {
    return await withDatabase('sizing', (databaseUrl) => measure(url, databaseUrl, count, (receiver.address() as AddressInfo).port));
  } finally {
    receiver.close();
  }
}

async function measure(url: string, databaseUrl: string, count: number, receiverPort: number): Promise<SizingResult> {
  const prefix = benchPrefix('sizing');
  const names = topologyNames(prefix);
  const admin = new pg.Client({ connectionString: databaseUrl });
  await admin.connect();
  const database = new URL(databaseUrl).pathname.slice(1);
  const programs: ProgramProcess[] = [];
  const broker = new BrokerConnection({ url, name: 'bench-sizing', logger: silentLogger() });
  try {
    await insertMerchants(admin, receiverPort);
    await broker.open();
    const channel = await broker.createChannel();
    await declareIntake(channel, prefix);
    await channel.close();
    const ports = { dispatcher: await freePort(), recorder: await freePort(), api: await freePort(), apiMetrics: await freePort() };
    const base = databaseProgramEnv(url, prefix, databaseUrl, KEY, 0);
    const common = { ...base, ALLOW_PRIVATE_TARGETS: 'true', RETRY_SCHEDULE: '1s,2s', LOG_LEVEL: 'warn' };
    programs.push(startProgram('recorder/main.js', { ...common, METRICS_PORT: String(ports.recorder) }));
    await until('recorder leads', async () => (await scrape(ports.recorder, 'webhooks_delivery_log_leading')) === 1, 60_000, 100);
    programs.push(startProgram('dispatcher/main.js', { ...common, METRICS_PORT: String(ports.dispatcher) }));
    programs.push(
      startProgram('api/main.js', {
        ...common,
        PORT: String(ports.api),
        METRICS_PORT: String(ports.apiMetrics),
        AUTH_JWT_SECRET: JWT_SECRET,
        PORTAL_PUBLIC_URL: 'http://127.0.0.1:1',
        LOG_RATE_LIMIT: '100000,10000',
      }),
    );
    await until('dispatcher ready', async () => (await fetch(`http://127.0.0.1:${ports.dispatcher}/readyz`).catch(() => undefined))?.status === 200, 60_000, 100);
    await until('API ready', async () => (await fetch(`http://127.0.0.1:${ports.api}/readyz`).catch(() => undefined))?.status === 200, 60_000, 100);

    const counter = connectionCounter(admin, database);
    // At rest: every program started and idle, over 5 s, once start-up's connections have gone
    // (a pool closes a connection idle for 10 s, pg's idleTimeoutMillis): else "at rest" counts
    // whichever start-up queries ran last (a run measured the recorder's schema check as a 2nd).
    await new Promise((resolve) => setTimeout(resolve, 11_000));
    await counter.sample(5_000, 'rest');
    const sizeBefore = await sizes(admin);
    const streamsBefore = streamSizes(names);

    const started = Date.now();
    const reading = readLogs(ports.api, () => Date.now() - started < 20_000);
    const publishing = publishAll(broker, names.events, count);
    const settled = untilSettled(admin, count);
    await counter.sample(undefined, 'peak', Promise.all([publishing, reading, settled]));
    const seconds = (Date.now() - started) / 1000;
    const outcomes = await outcomesOf(admin);

    await admin.query('CHECKPOINT');
    const sizeAfter = await sizes(admin);
    const streamsAfter = streamSizes(names);
    const databaseBytes = Object.fromEntries(Object.keys(sizeAfter).map((k) => [k, sizeAfter[k]! - (sizeBefore[k] ?? 0)]));
    return {
      webhooks: count,
      seconds,
      connections: counter.result(),
      databaseBytes,
      streamBytes: { deliveries: streamsAfter.deliveries - streamsBefore.deliveries, failed: streamsAfter.failed - streamsBefore.failed },
      outcomes,
    };
  } catch (err) {
    throw new Error(`${(err as Error).message}\n${programs.map((p) => p.output().slice(-1_500)).join('\n---\n')}`);
  } finally {
    for (const program of programs.reverse()) await program.stop();
    await broker.close();
    await admin.end();
    await deleteTopology(url, prefix);
  }
}

/** The merchants as the admin API writes them (withDatabase made the schema): settings as JSON, the secret sealed with the programs' key. */
async function insertMerchants(admin: pg.Client, port: number): Promise<void> {
  const box = new SecretBox(KEY);
  const rows = [
    ...MERCHANTS.map(({ id, path }) => ({ id, url: `http://127.0.0.1:${port}${path}` })),
    ...READERS.map((id) => ({ id, url: `http://127.0.0.1:${port}/live` })),
  ];
  for (const [i, { id, url }] of rows.entries()) {
    const [publicKey, webhook, secrets] = columnsOf(
      { id, publicKey: `pk_test_sizing_${i}_0123456789`, endpoints: [{ id: newEndpointId(), url, enabled: true, secret: `whsec_${randomBytes(24).toString('base64')}`, secretIssuedAt: new Date().toISOString() }] } as Merchant,
      box,
    );
    await admin.query('INSERT INTO merchants (id, public_key, endpoints, secrets, version) VALUES ($1, $2, $3::jsonb, $4, 1)', [id, publicKey, webhook, secrets]);
  }
}

/** Samples pg_stat_activity every 50 ms: the most connections each application_name held. */
function connectionCounter(admin: pg.Client, database: string) {
  const counts: Record<string, ConnectionCounts> = {};
  return {
    async sample(forMs: number | undefined, phase: keyof ConnectionCounts, until?: Promise<unknown>): Promise<void> {
      let done = false;
      void until?.finally(() => (done = true));
      const end = forMs === undefined ? Infinity : Date.now() + forMs;
      while (!done && Date.now() < end) {
        const { rows } = await admin.query<{ name: string; n: number }>(
          `SELECT coalesce(nullif(application_name, ''), '(unnamed)') AS name, count(*)::int AS n FROM pg_stat_activity
            WHERE datname = $1 AND pid <> pg_backend_pid() GROUP BY 1`,
          [database],
        );
        for (const { name, n } of rows) {
          const entry = (counts[name] ??= { rest: 0, peak: 0 });
          entry[phase] = Math.max(entry[phase], n);
          if (phase === 'rest') entry.peak = Math.max(entry.peak, n);
        }
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      await until;
    },
    result: () => counts,
  };
}

/** Bytes per table family (a partition counts with its parent), and the database in all. */
async function sizes(admin: pg.Client): Promise<Record<string, number>> {
  const { rows } = await admin.query<{ family: string; bytes: string }>(
    `SELECT CASE WHEN c.relname LIKE 'delivery_records%' THEN 'delivery_records'
                 WHEN c.relname IN ('delivery_webhooks', 'failed_webhooks', 'webhook_waits', 'webhook_bodies') THEN c.relname
                 ELSE 'other' END AS family,
            sum(pg_total_relation_size(c.oid))::bigint AS bytes
       FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') GROUP BY 1`,
  );
  const families = Object.fromEntries(rows.map((r) => [r.family, Number(r.bytes)]));
  const { rows: [all] } = await admin.query<{ bytes: string }>('SELECT pg_database_size(current_database())::bigint AS bytes');
  return { ...families, database: Number(all!.bytes) };
}

/** A stream's segments and indexes on the broker's disk: its directory is named after the queue. */
function streamSizes(names: ReturnType<typeof topologyNames>): { deliveries: number; failed: number } {
  const of = (queue: string) => {
    try {
      const dirs = readdirSync(STREAM_DIR).filter((d) => d.includes(queue.replace(/[^A-Za-z0-9_-]/g, '_')) || d.includes(queue));
      let total = 0;
      for (const dir of dirs) for (const file of readdirSync(join(STREAM_DIR, dir))) total += statSync(join(STREAM_DIR, dir, file)).size;
      return total;
    } catch {
      return NaN;
    }
  };
  return { deliveries: of(names.deliveries), failed: of(names.failed) };
}

async function publishAll(broker: BrokerConnection, exchange: string, count: number): Promise<void> {
  const window: Promise<void>[] = [];
  for (let i = 0; i < count; i++) {
    const merchantId = merchantOf(i);
    window.push(broker.publish(exchange, 'charge.completed', eventBody(merchantId), { persistent: true, contentType: 'application/json', messageId: `evt_size_${i}` }));
    if (window.length >= 500) await Promise.all(window.splice(0));
  }
  await Promise.all(window);
}

/** Every webhook in the log with a final status: the recorder stored its last record. */
async function untilSettled(admin: pg.Client, count: number): Promise<void> {
  await until(
    `${count} webhooks settled in the delivery log`,
    async () => {
      const { rows: [row] } = await admin.query<{ n: number }>(`SELECT count(*)::int AS n FROM delivery_webhooks WHERE status IN ('delivered', 'failed')`);
      return row!.n >= count;
    },
    1_800_000,
    1_000,
  );
}

async function outcomesOf(admin: pg.Client): Promise<SizingResult['outcomes']> {
  const { rows: [row] } = await admin.query<{ delivered: number; retried: number; failed: number }>(
    `SELECT count(*) FILTER (WHERE status = 'delivered')::int AS delivered,
            count(*) FILTER (WHERE status = 'delivered' AND attempts > 1)::int AS retried,
            count(*) FILTER (WHERE status = 'failed')::int AS failed FROM delivery_webhooks`,
  );
  return row!;
}

/** Log reads from every merchant at once, 4 in flight each, while `going()` holds. */
async function readLogs(port: number, going: () => boolean): Promise<void> {
  const ids = [...MERCHANTS.map((m) => m.id), ...READERS];
  const tokens = await Promise.all(
    ids.map((id) => new SignJWT({}).setProtectedHeader({ alg: 'HS256', typ: 'JWT' }).setSubject(id).setIssuedAt().setExpirationTime('1h').sign(new TextEncoder().encode(JWT_SECRET))),
  );
  const reader = async (i: number) => {
    const headers = { 'x-auth-token': `pk_test_sizing_${i}_0123456789`, authorization: `Bearer ${tokens[i]}` };
    while (going()) {
      const res = await fetch(`http://127.0.0.1:${port}/nucleus/webhooks?limit=100`, { headers }).catch(() => undefined);
      await res?.arrayBuffer();
    }
  };
  await Promise.all(ids.flatMap((_, i) => Array.from({ length: 4 }, () => reader(i))));
}

/** /live answers 204, except 500 to the first attempt of the webhooks failsFirst() names; /dead always 500. */
async function startFlakyReceiver(): Promise<Server> {
  const seen = new Set<string>();
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      const id = String(req.headers['webhook-id']);
      const index = Number(/^evt_size_(\d+)$/.exec(id)?.[1] ?? -1);
      let status = 204;
      if (req.url === '/dead') status = 500;
      else if (failsFirst(index) && !seen.has(id)) {
        seen.add(id);
        status = 500;
      }
      res.writeHead(status).end();
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return server;
}
