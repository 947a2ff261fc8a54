/**
 * Resend latency as the failed stream grows: fills `failed` with N unresolved failure entries,
 * starts the API (timing its replay), then times sequential resends of random references.
 */
import { randomUUID } from 'node:crypto';
import { writeFileSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import amqp from 'amqplib';
import { SignJWT } from 'jose';
import { Agent, request } from 'undici';
import { loadApiConfig } from '../apps/api/config.js';
import { startApi } from '../apps/api/program.js';
import { ENTRY_TYPES, HEADERS, sampleEvent } from '../libs/contracts/index.js';
import { silentLogger } from '../libs/logger/index.js';
import { topologyNames } from '../libs/topology/index.js';
import { deleteTopology } from './fixtures.js';
import { percentile, round } from './stats.js';

export interface ResendResult {
  entries: number;
  replayMs: number;
  heapBytesPerEntry: number;
  /** Timed with undici's request over one kept-alive connection. */
  p50Ms: number;
  p99Ms: number;
  /** The same resends timed with fetch (the client of earlier figures), alternating with undici's. */
  fetchP50Ms: number;
  fetchP99Ms: number;
  samples: number;
}

const SECRET = 'bench-secret-long-enough-for-hs256-0000000';

export async function benchResend(url: string, entries: number, samples: number): Promise<ResendResult> {
  const prefix = `bench.resend.${randomUUID().slice(0, 8)}`;
  const names = topologyNames(prefix);
  const merchant = { id: 'm_bench', publicKey: 'pk_test_bench_0123456789', webhook: { url: 'http://127.0.0.1:9/none', enabled: true, secret: `whsec_${Buffer.from('bench-secret-bench-secret').toString('base64')}` } };
  const dir = mkdtempSync(join(tmpdir(), 'bench-'));
  writeFileSync(join(dir, 'merchants.json'), JSON.stringify({ merchants: [merchant] }));

  const connection = await amqp.connect(url);
  const channel = await connection.createConfirmChannel();
  await channel.assertQueue(names.failed, { durable: true, arguments: { 'x-queue-type': 'stream', 'x-max-age': '1D' } });
  const references: string[] = [];
  const body = Buffer.from(JSON.stringify(sampleEvent('charge.completed', merchant.id)));
  for (let i = 0; i < entries; i++) {
    const reference = randomUUID();
    references.push(reference);
    const ok = channel.sendToQueue(names.failed, body, {
      messageId: `evt_${i}`,
      headers: { [HEADERS.entryType]: ENTRY_TYPES.failure, [HEADERS.merchantId]: merchant.id, [HEADERS.reference]: reference, [HEADERS.attempts]: 8 },
    });
    if (!ok) await new Promise((resolve) => channel.once('drain', resolve));
    if (i % 5_000 === 4_999) await channel.waitForConfirms();
  }
  await channel.waitForConfirms();

  const config = loadApiConfig({
    RABBITMQ_URL: url,
    TOPOLOGY_PREFIX: prefix,
    PORT: '0',
    MERCHANTS_FILE: join(dir, 'merchants.json'),
    RETRY_SCHEDULE: '',
    FAILED_RETENTION: '1D',
    AUTH_JWT_SECRET: SECRET,
    // The resend path does not touch the delivery log; without this the API wants a PostgreSQL.
    DELIVERY_LOG: 'off',
    // FAILED_SPOOL_SIZE=0 in the bench's environment measures the stream read it replaces.
    FAILED_SPOOL_SIZE: process.env.FAILED_SPOOL_SIZE,
  });
  global.gc?.();
  const heapBefore = process.memoryUsage().heapUsed;
  const started = performance.now();
  const api = await startApi(config, silentLogger(), { rateLimit: { perMinute: 1e9, burst: 1e9 } });
  while (!api.index.ready) await new Promise((resolve) => setTimeout(resolve, 5));
  const replayMs = performance.now() - started;
  global.gc?.();
  const heapBytesPerEntry = (process.memoryUsage().heapUsed - heapBefore) / entries;

  const token = await new SignJWT({}).setProtectedHeader({ alg: 'HS256' }).setSubject(merchant.id).setExpirationTime('1h').sign(new TextEncoder().encode(SECRET));
  const headers = { 'x-auth-token': merchant.publicKey, authorization: `Bearer ${token}` };
  const latencies: number[] = [];
  const fetchLatencies: number[] = [];
  const warmup = 30; // JIT and connection warm-up, not timed
  // The client runs in the API's process: fetch costs about 0.6 ms more per request than undici's
  // request on this machine, so both are timed, alternating, and the service is read from undici's.
  const agent = new Agent({ connections: 1 });
  // Distinct references (a repeat answers 404 at once); `entries` must cover the samples.
  const picked = [...references].sort(() => Math.random() - 0.5).slice(0, 2 * (samples + warmup));
  if (picked.length < 2 * (samples + warmup)) throw new Error(`${entries} entries are too few for ${samples} samples of each client`);
  for (const [i, reference] of picked.entries()) {
    const target = `http://127.0.0.1:${api.port}/nucleus/tnx/webhook?reference=${reference}`;
    const t0 = performance.now();
    let status: number;
    if (i % 2 === 0) {
      const res = await request(target, { method: 'POST', headers, dispatcher: agent });
      await res.body.text();
      status = res.statusCode;
    } else {
      const res = await fetch(target, { method: 'POST', headers });
      await res.text();
      status = res.status;
    }
    if (status !== 200) throw new Error(`resend answered ${status}`);
    if (i >= 2 * warmup) (i % 2 === 0 ? latencies : fetchLatencies).push(performance.now() - t0);
  }
  await agent.close();
  await api.stop();
  await connection.close();
  // Every queue and stream the API declared (the retries snapshots stream was left behind before).
  await deleteTopology(url, prefix, 0);

  latencies.sort((a, b) => a - b);
  fetchLatencies.sort((a, b) => a - b);
  return {
    entries,
    replayMs: round(replayMs, 0),
    heapBytesPerEntry: round(heapBytesPerEntry, 0),
    p50Ms: round(percentile(latencies, 50)),
    p99Ms: round(percentile(latencies, 99)),
    fetchP50Ms: round(percentile(fetchLatencies, 50)),
    fetchP99Ms: round(percentile(fetchLatencies, 99)),
    samples,
  };
}
