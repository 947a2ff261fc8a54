import { createHash, randomBytes, randomUUID } from 'node:crypto';
import pg from 'pg';
import amqp from 'amqplib';
import { sampleEvent } from '../libs/contracts/index.js';
import { intakeSpec, topologyNames } from '../libs/topology/index.js';
import { type Database, openPostgres } from '../libs/delivery-store/index.js';
import { migrate } from '../libs/migrations/index.js';
import { type Merchant, SecretBox } from '../libs/merchants/index.js';
import { columnsOf } from '../libs/merchants/rows.js';

export const SECRET = `whsec_${Buffer.from('bench-secret-bench-secret-0123').toString('base64')}`;

export function benchPrefix(name: string): string {
  return `bench.${name}.${randomUUID().slice(0, 8)}`;
}

/** A bench's merchant: one endpoint a URL (several for a merchant given several), `endpoint` added to each (e.g. orderByReference). */
export type BenchMerchant = { id: string; url: string | string[]; endpoint?: Record<string, unknown> };

/** The key the benches' programs seal and open the merchants' secrets with (base64 of 32 bytes). */
export const BENCH_SECRETS_KEY = Buffer.from('bench-secrets-key-32-bytes-long!').toString('base64');

/**
 * Writes the merchants a bench starts its programs with into the database at `databaseUrl`, as rows
 * the programs read (their secrets sealed with BENCH_SECRETS_KEY), and answers the programs'
 * environment for them: DATABASE_URL and SECRETS_KEY. Merchants already there are replaced.
 */
export async function benchMerchants(databaseUrl: string, merchants: Array<BenchMerchant | Merchant>): Promise<{ DATABASE_URL: string; SECRETS_KEY: string }> {
  const box = new SecretBox(Buffer.from(BENCH_SECRETS_KEY, 'base64'));
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    for (const [i, m] of merchants.entries()) {
      const merchant: Merchant = 'publicKey' in m ? m : {
        id: m.id,
        publicKey: `pk_test_bench_${i}_0123456789`,
        endpoints: [m.url].flat().map((url, n) => ({ id: `ep_bench_${i}${n === 0 ? '' : `_${n}`}`, url, enabled: true, secret: SECRET, ...m.endpoint })),
      } as Merchant;
      await client.query(
        `INSERT INTO merchants (id, public_key, endpoints, secrets, version) VALUES ($1, $2, $3::jsonb, $4, 1)
         ON CONFLICT (id) DO UPDATE SET public_key = EXCLUDED.public_key, endpoints = EXCLUDED.endpoints, secrets = EXCLUDED.secrets, version = merchants.version + 1, change_xid = pg_current_xact_id()`,
        [merchant.id, ...columnsOf(merchant, box)],
      );
    }
  } finally {
    await client.end();
  }
  return { DATABASE_URL: databaseUrl, SECRETS_KEY: BENCH_SECRETS_KEY };
}

/** A realistic upstream body (~450 bytes) for a merchant, stamped with its publish time. */
export function eventBody(merchantId: string, sentAt = Date.now(), warmup = false): Buffer {
  const event = sampleEvent('charge.completed', merchantId);
  event.data.sentAt = sentAt;
  if (warmup) event.data.warmup = true;
  event.data.benchMerchant = merchantId;
  return Buffer.from(JSON.stringify(event));
}

/**
 * Publishes `count` events into dispatch with confirms, in windows to bound memory: straight into
 * the queue, or with `upstream` through the events exchange as upstream does (so that intake
 * checks their keys). `firstIndex`: the first messageId's number (a second fill behind a first keeps them apart).
 * `randomKeys`: each messageId a digest of that number, as an upstream's UUIDs fall at random places in
 * the keys' index, where `evt_N` are neighbours.
 */
export async function fillDispatch(url: string, prefix: string, count: number, merchantOf: (i: number) => string, options: { upstream?: boolean; firstIndex?: number; randomKeys?: boolean } = {}): Promise<void> {
  const connection = await amqp.connect(url);
  const channel = await connection.createConfirmChannel();
  const spec = intakeSpec(prefix);
  const { dispatch } = topologyNames(prefix);
  await channel.assertQueue(dispatch, { durable: true, arguments: { ...spec.queue.arguments } });
  if (options.upstream) {
    await channel.assertExchange(spec.exchange.name, spec.exchange.type, { durable: true });
    await channel.bindQueue(dispatch, spec.exchange.name, spec.binding.routingKey);
  }
  const send = options.upstream
    ? (body: Buffer, props: amqp.Options.Publish) => channel.publish(spec.exchange.name, 'charge.completed', body, props)
    : (body: Buffer, props: amqp.Options.Publish) => channel.sendToQueue(dispatch, body, props);
  const first = options.firstIndex ?? 0;
  const key = options.randomKeys ? (n: number) => createHash('sha256').update(`evt_${n}`).digest('hex').slice(0, 32) : (n: number) => `evt_${n}`;
  for (let i = 0; i < count; i++) {
    if (!send(eventBody(merchantOf(i)), { persistent: true, messageId: key(first + i), contentType: 'application/json' })) {
      await new Promise((resolve) => channel.once('drain', resolve));
    }
    if (i % 2_000 === 1_999) await channel.waitForConfirms();
  }
  await channel.waitForConfirms();
  await connection.close();
}

export async function deleteTopology(url: string, prefix: string): Promise<void> {
  const names = topologyNames(prefix);
  const connection = await amqp.connect(url);
  for (const queue of [names.dispatch, names.failed, names.invalid, names.deliveries]) {
    const ch = await connection.createChannel();
    ch.on('error', () => {});
    await ch.deleteQueue(queue).catch(() => {});
    await ch.close().catch(() => {});
  }
  const ch = await connection.createChannel();
  ch.on('error', () => {});
  // Every program declares the operational exchange too: left behind, each run's stayed on the broker.
  for (const exchange of [names.events, names.operational]) await ch.deleteExchange(exchange).catch(() => {});
  await ch.close().catch(() => {});
  await connection.close();
}

/**
 * A benchmark's own database on the local PostgreSQL (BENCH_DATABASE_URL, else
 * postgres://postgres@127.0.0.1:5432/postgres as the admin connection), dropped after `work`.
 */
const adminUrl = () => process.env.BENCH_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';

/** `migrateWith`: another build's migrate (an A/B against an earlier commit, whose programs refuse a newer schema). */
export async function withDatabase<T>(label: string, work: (url: string) => Promise<T>, keep?: string, migrateWith: (db: Database) => Promise<unknown> = migrate): Promise<T> {
  const name = keep ?? `${process.env.BENCH_DATABASE_PREFIX ?? 'h21_bench'}_${label}_${randomBytes(3).toString('hex')}`;
  if (!/^[a-z_][a-z0-9_]*$/.test(name)) throw new Error(`not a database name: ${name}`);
  const admin = new pg.Client({ connectionString: adminUrl() });
  await admin.connect();
  const exists = (await admin.query('SELECT 1 FROM pg_database WHERE datname = $1', [name])).rows.length > 0;
  if (!exists) await admin.query(`CREATE DATABASE ${name}`);
  const url = new URL(adminUrl());
  url.pathname = `/${name}`;
  try {
    // The schema, as `webhooks migrate` makes it before the programs start.
    const database = openPostgres(url.toString(), { statementTimeoutMs: 0 });
    await migrateWith(database).finally(() => database.close());
    return await work(url.toString());
  } finally {
    // A kept database is the caller's to drop (it is ~4 GB with 10,000,000 attempts).
    if (!keep) await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`).catch(() => {});
    await admin.end();
  }
}


/**
 * Publishes `rate` a second for `seconds` (the i-th at its due time, confirms awaited 100 at a
 * time), calling `sample(second)` every 15 s and once at the end.
 */
export async function publishPaced(rate: number, seconds: number, publish: (i: number) => Promise<void>, sample: (second: number) => Promise<void>): Promise<void> {
  const started = performance.now();
  let nextSample = 0;
  const confirms: Promise<void>[] = [];
  for (let i = 0; i < rate * seconds; i++) {
    const due = started + (i / rate) * 1000;
    const wait = due - performance.now();
    if (wait > 1) await new Promise((resolve) => setTimeout(resolve, wait));
    const second = (performance.now() - started) / 1000;
    if (second >= nextSample) {
      nextSample += 15;
      await sample(Math.round(second));
    }
    confirms.push(publish(i));
    if (confirms.length >= 100) await Promise.all(confirms.splice(0));
  }
  await Promise.all(confirms);
  await sample(seconds);
}

/** A program's environment with merchants in the bench's database, one broker node. */
export function databaseProgramEnv(url: string, prefix: string, databaseUrl: string, key: Buffer, metricsPort: number): Record<string, string> {
  return {
    RABBITMQ_URL: url,
    TOPOLOGY_PREFIX: prefix,
    DATABASE_URL: databaseUrl,
    SECRETS_KEY: key.toString('base64'),
    METRICS_PORT: String(metricsPort),
    QUORUM_GROUP_SIZE: '1',
    STREAM_CLUSTER_SIZE: '1',
  };
}
