/**
 * Resend latency as the failure index grows: fills `failed_webhooks` in PostgreSQL with N
 * unresolved failures of one merchant (and as many of others), starts the API, then times
 * sequential resends of distinct random references over HTTP.
 */
import { randomUUID } from 'node:crypto';
import { SignJWT } from 'jose';
import { Agent, request } from 'undici';
import { loadApiConfig } from '../apps/api/config.js';
import { startApi } from '../apps/api/program.js';
import { HEADERS, sampleEvent } from '../libs/contracts/index.js';
import { openPostgres } from '../libs/delivery-store/index.js';
import { silentLogger } from '../libs/logger/index.js';
import type { Merchant } from '../libs/merchants/index.js';
import { benchMerchants, deleteTopology, withDatabase } from './fixtures.js';
import { percentile, round } from './stats.js';

export interface ResendResult {
  entries: number;
  /** From start to listening. */
  startMs: number;
  /** Timed with undici's request over one kept-alive connection. */
  p50Ms: number;
  p99Ms: number;
  samples: number;
}

const SECRET = 'bench-secret-long-enough-for-hs256-0000000';

export async function benchResend(url: string, entries: number, samples: number): Promise<ResendResult> {
  const prefix = `bench.resend.${randomUUID().slice(0, 8)}`;
  const merchant: Merchant = { id: 'm_bench', publicKey: 'pk_test_bench_0123456789', endpoints: [{ id: 'ep_bench_resend', url: 'http://127.0.0.1:9/none', enabled: true, secret: `whsec_${Buffer.from('bench-secret-bench-secret').toString('base64')}` }] };

  return withDatabase('resend', (dbUrl) => run(url, entries, samples, prefix, merchant, dbUrl));
}

async function run(url: string, entries: number, samples: number, prefix: string, merchant: Merchant, dbUrl: string): Promise<ResendResult> {
  const db = openPostgres(dbUrl, { statementTimeoutMs: 600_000 });
  // The merchant's failures, and as many of another merchant's: the index is shared.
  const body = JSON.stringify(sampleEvent('charge.completed', merchant.id));
  for (const [owner, from] of [[merchant.id, 0], ['m_other', entries]] as const) {
    await db.query(
      `INSERT INTO failed_webhooks (merchant_id, webhook_id, failed_at, event, merchant_refs, reason, attempts, content, headers)
       SELECT $1, 'evt_' || i, now() - make_interval(secs => i), 'charge.completed', ARRAY[$1 || chr(31) || 'ref_' || i], 'attempts-exhausted', 8, $2,
         jsonb_build_object($4::text, $1::text, $5::text, 'ref_' || i, $6::text, 'evt_' || i)
       FROM generate_series($3::bigint, $3::bigint + $7::bigint - 1) AS i`,
      [owner, body, from, HEADERS.merchantId, HEADERS.reference, HEADERS.webhookId, entries],
    );
  }
  await db.query('VACUUM ANALYZE failed_webhooks');

  const config = loadApiConfig({
    RABBITMQ_URL: url,
    TOPOLOGY_PREFIX: prefix,
    PORT: '0',
    ...(await benchMerchants(dbUrl, [merchant])),
    RETRY_SCHEDULE: '',
    FAILED_RETENTION: '1D',
    AUTH_JWT_SECRET: SECRET,
    DELIVERY_LOG: 'off',
  });
  const started = performance.now();
  const api = await startApi(config, silentLogger(), { rateLimit: { perMinute: 1e9, burst: 1e9 } });
  const startMs = performance.now() - started;

  const token = await new SignJWT({}).setProtectedHeader({ alg: 'HS256' }).setSubject(merchant.id).setExpirationTime('1h').sign(new TextEncoder().encode(SECRET));
  const headers = { 'x-auth-token': merchant.publicKey, authorization: `Bearer ${token}` };
  const latencies: number[] = [];
  const warmup = 30; // JIT, connections and plans warm, not timed
  const agent = new Agent({ connections: 1 });
  // Distinct references (a repeat answers 404 at once).
  const picked = new Set<number>();
  while (picked.size < Math.min(entries, samples + warmup)) picked.add(Math.floor(Math.random() * entries));
  for (const n of picked) {
    const res = await request(`http://127.0.0.1:${api.port}/nucleus/tnx/webhook?reference=ref_${n}`, { method: 'POST', headers, dispatcher: agent });
    await res.body.text();
    if (res.statusCode !== 200) throw new Error(`resend answered ${res.statusCode}`);
  }
  // Timed pass: fresh references not used in the warm-up.
  const timed = new Set<number>();
  while (timed.size < samples && timed.size + picked.size < entries) {
    const n = Math.floor(Math.random() * entries);
    if (!picked.has(n)) timed.add(n);
  }
  for (const n of timed) {
    const t0 = performance.now();
    const res = await request(`http://127.0.0.1:${api.port}/nucleus/tnx/webhook?reference=ref_${n}`, { method: 'POST', headers, dispatcher: agent });
    await res.body.text();
    if (res.statusCode !== 200) throw new Error(`resend answered ${res.statusCode}`);
    latencies.push(performance.now() - t0);
  }
  await agent.close();
  await api.stop();
  await db.close();
  await deleteTopology(url, prefix);

  latencies.sort((a, b) => a - b);
  return { entries, startMs: round(startMs, 0), p50Ms: round(percentile(latencies, 50)), p99Ms: round(percentile(latencies, 99)), samples: latencies.length };
}
