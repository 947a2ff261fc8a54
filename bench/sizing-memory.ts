/**
 * `npm run bench -- sizing-memory`: what 100,000 merchants cost the two programs that hold the
 * merchant directory in memory, the dispatcher and the API, each as deployed (its own process):
 * resident memory and V8 heap once ready on an empty merchants table, then on a table of
 * `count` merchants (bench/merchants.ts's rows: a URL, a public key and a sealed secret each, a
 * third with an events filter).
 */
import { openPostgres } from '../libs/delivery-store/index.js';
import { benchPrefix, databaseProgramEnv, deleteTopology, withDatabase } from './fixtures.js';
import { fill, KEY } from './merchants.js';
import { freePort, rssOf, scrape, startProgram, until } from './processes.js';

export interface ProgramMemory {
  rssMb: number;
  heapUsedMb: number;
}

export interface DirectoryMemoryResult {
  merchants: number;
  dispatcher: { empty: ProgramMemory; full: ProgramMemory };
  api: { empty: ProgramMemory; full: ProgramMemory };
}

export async function benchDirectoryMemory(url: string, count: number): Promise<DirectoryMemoryResult> {
  return withDatabase('sizing_memory', async (databaseUrl) => {
    const database = openPostgres(databaseUrl, { statementTimeoutMs: 600_000 });
    try {
      const empty = { dispatcher: await measure('dispatcher', url, databaseUrl), api: await measure('api', url, databaseUrl) };
      await fill(database, count);
      const full = { dispatcher: await measure('dispatcher', url, databaseUrl), api: await measure('api', url, databaseUrl) };
      return { merchants: count, dispatcher: { empty: empty.dispatcher, full: full.dispatcher }, api: { empty: empty.api, full: full.api } };
    } finally {
      await database.close();
    }
  });
}

/** One program from spawn to ready, then 5 s settled (the heap after V8's next collections). */
async function measure(program: 'dispatcher' | 'api', url: string, databaseUrl: string): Promise<ProgramMemory> {
  const prefix = benchPrefix(`memory-${program}`);
  const metrics = await freePort();
  const env = { ...databaseProgramEnv(url, prefix, databaseUrl, KEY, metrics), DELIVERY_LOG: 'off', LOG_LEVEL: 'warn' };
  const apiPort = await freePort();
  const child =
    program === 'dispatcher'
      ? startProgram('dispatcher/main.js', env)
      : startProgram('api/main.js', { ...env, PORT: String(apiPort), AUTH_JWT_SECRET: 'bench-memory-jwt-secret-0123456789abcdef', PORTAL_PUBLIC_URL: 'http://127.0.0.1:1' });
  const readyUrl = program === 'dispatcher' ? `http://127.0.0.1:${metrics}/readyz` : `http://127.0.0.1:${apiPort}/readyz`;
  try {
    await until(`${program} ready`, async () => (await fetch(readyUrl).catch(() => undefined))?.status === 200, 120_000, 50).catch((err: Error) => {
      throw new Error(`${err.message}\n${child.output().slice(-2_000)}`);
    });
    await new Promise((resolve) => setTimeout(resolve, 5_000));
    const heapUsed = (await scrape(metrics, 'nodejs_heap_size_used_bytes')) ?? NaN;
    return { rssMb: Math.round(rssOf(child.child.pid!).nowMb), heapUsedMb: Math.round(heapUsed / 1024 / 1024) };
  } finally {
    await child.stop();
    await deleteTopology(url, prefix);
  }
}
