/**
 * A dispatcher's start-up with a large merchants table: 100,000 merchants (each with its own
 * sealed secret) in a fresh database, then the dispatcher as deployed (its own process) until
 * /readyz answers 200; its resident memory then, against the same dispatcher on an empty table.
 */
import { randomBytes } from 'node:crypto';
import { PgMerchantDirectory, SecretBox } from '../libs/merchants/index.js';
import { silentLogger } from '../libs/logger/index.js';
import { columnsOf } from '../libs/merchants/rows.js';
import { type Merchant, newEndpointId } from '../libs/merchants/index.js';
import { openPostgres } from '../libs/delivery-store/index.js';
import { benchPrefix, databaseProgramEnv, deleteTopology, withDatabase } from './fixtures.js';
import { freePort, rssOf, scrape, startProgram, until } from './processes.js';

export interface MerchantsStartupResult {
  merchants: number;
  fillSeconds: number;
  readyMs: number;
  rssMb: number;
  heapUsedMb: number;
  emptyReadyMs: number;
  emptyRssMb: number;
  emptyHeapUsedMb: number;
  /** What the directory itself holds: the heap after collection with it loaded, less before, in this process. */
  directoryHeapMb: number;
}

export const KEY = randomBytes(32);

export async function benchMerchantsStartup(url: string, count: number): Promise<MerchantsStartupResult> {
  return withDatabase('merchants', async (databaseUrl) => {
    const database = openPostgres(databaseUrl, { statementTimeoutMs: 600_000 });
    try {
      const empty = await startAndMeasure(url, databaseUrl);
      const filledAt = Date.now();
      await fill(database, count);
      const fillSeconds = (Date.now() - filledAt) / 1000;
      const full = await startAndMeasure(url, databaseUrl);
      const directoryHeapMb = await heldByDirectory(database);
      return { merchants: count, fillSeconds, readyMs: full.readyMs, rssMb: full.rssMb, heapUsedMb: full.heapUsedMb, emptyReadyMs: empty.readyMs, emptyRssMb: empty.rssMb, emptyHeapUsedMb: empty.heapUsedMb, directoryHeapMb };
    } finally {
      await database.close();
    }
  });
}

/** The directory loaded in this process (npm run bench runs with --expose-gc), measured between full collections. */
async function heldByDirectory(database: ReturnType<typeof openPostgres>): Promise<number> {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (!gc) return NaN;
  gc();
  const before = process.memoryUsage().heapUsed;
  const directory = new PgMerchantDirectory(database, new SecretBox(KEY), silentLogger(), { pollIntervalMs: 3_600_000 });
  await directory.start();
  gc();
  const after = process.memoryUsage().heapUsed;
  await directory.close();
  return Math.round(((after - before) / 1024 / 1024) * 10) / 10;
}

/** Realistic rows: a URL of its own per merchant, a sealed secret, a third with an events filter. */
export async function fill(database: ReturnType<typeof openPostgres>, count: number): Promise<void> {
  const box = new SecretBox(KEY);
  for (let start = 0; start < count; start += 5_000) {
    const ids: string[] = [];
    const keys: string[] = [];
    const webhooks: string[] = [];
    const secrets: string[] = [];
    for (let i = start; i < Math.min(count, start + 5_000); i++) {
      const id = `m_bench_${String(i).padStart(6, '0')}`;
      const [publicKey, webhook, sealed] = columnsOf(
        {
          id,
          publicKey: `pk_live_${randomBytes(12).toString('hex')}`,
          endpoints: [{
            id: newEndpointId(),
            url: `https://merchant-${i}.example.com/webhooks/payments`,
            enabled: true,
            secret: `whsec_${randomBytes(24).toString('base64')}`,
            secretIssuedAt: new Date().toISOString(),
            ...(i % 3 === 0 ? { events: ['charge.completed' as const, 'refund.completed' as const] } : {}),
          }],
        },
        box,
      );
      ids.push(id);
      keys.push(publicKey);
      webhooks.push(webhook!);
      secrets.push(sealed!);
    }
    await database.query(
      'INSERT INTO merchants (id, public_key, endpoints, secrets, version) SELECT id, key, endpoints::jsonb, secrets, 1 FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS t(id, key, endpoints, secrets)',
      [ids, keys, webhooks, secrets],
    );
  }
  await database.query('VACUUM ANALYZE merchants');
}

async function startAndMeasure(url: string, databaseUrl: string): Promise<{ readyMs: number; rssMb: number; heapUsedMb: number }> {
  const prefix = benchPrefix('merchants');
  const port = await freePort();
  const startedAt = Date.now();
  const program = startProgram('dispatcher/main.js', { ...databaseProgramEnv(url, prefix, databaseUrl, KEY, port), DELIVERY_LOG: 'off' });
  try {
    await until('dispatcher ready', async () => (await fetch(`http://127.0.0.1:${port}/readyz`).catch(() => undefined))?.status === 200, 60_000, 10).catch((err: Error) => {
      throw new Error(`${err.message}\n${program.output().slice(-2_000)}`);
    });
    const readyMs = Date.now() - startedAt;
    // Settled: what it holds, not the garbage of loading (the heap figure is after V8's next collections).
    await new Promise((resolve) => setTimeout(resolve, 3_000));
    const heapUsed = (await scrape(port, 'nodejs_heap_size_used_bytes')) ?? NaN;
    return { readyMs, rssMb: rssOf(program.child.pid!).nowMb, heapUsedMb: heapUsed / 1024 / 1024 };
  } finally {
    await program.stop();
    await deleteTopology(url, prefix);
  }
}
