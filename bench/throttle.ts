/**
 * Throttle per endpoint (issue 55): 10,000 webhooks to one merchant throttled at 50/s, three
 * dispatcher processes as deployed (merchants in PostgreSQL, waits as rows), while ten other
 * merchants receive 20/s between them. Measured: how long the 10,000 take from the first publish
 * to the last receipt (200 s wanted, ± 10 %), the busiest second at the throttled receiver (arrival
 * = the body's sentAt + its latency; at most 55 wanted), webhooks failed (0 wanted), and the other
 * merchants' p95 publish-to-receipt latency against an idle run of the same length beforehand.
 * One run: it takes minutes.
 */
import { randomBytes } from 'node:crypto';
import { BrokerConnection } from '../libs/broker/index.js';
import { openPostgres } from '../libs/delivery-store/index.js';
import { silentLogger } from '../libs/logger/index.js';
import { SecretBox } from '../libs/merchants/index.js';
import { columnsOf } from '../libs/merchants/rows.js';
import { type Merchant, newEndpointId } from '../libs/merchants/index.js';
import { declareIntake, topologyNames } from '../libs/topology/index.js';
import { benchPrefix, databaseProgramEnv, deleteTopology, eventBody, withDatabase } from './fixtures.js';
import { freePort, type ProgramProcess, type ReceiverProcess, scrape, startProgram, until } from './processes.js';
import { percentile, round } from './stats.js';

const KEY = randomBytes(32);
const RATE = 50;
const WEBHOOKS = Number(process.env.BENCH_THROTTLE_WEBHOOKS ?? 10_000);
const OTHERS = 10;
const OTHERS_RATE = 20;
const IDLE_SECONDS = 30;

export interface ThrottleResult {
  seconds: number;
  busiestSecond: number;
  failed: number;
  idleP95Ms: number;
  loadedP95Ms: number;
  /** One other merchant's (2/s, in arrival order) longest latency in each run of 20 receipts (about 10 s), ms. */
  othersMaxPer10s: number[];
}

export function benchThrottle(url: string, throttled: ReceiverProcess, others: ReceiverProcess, log: (line: string) => void): Promise<ThrottleResult> {
  return withDatabase('throttle', (databaseUrl) => run(url, databaseUrl, throttled, others, log));
}

async function run(url: string, databaseUrl: string, throttled: ReceiverProcess, others: ReceiverProcess, log: (line: string) => void): Promise<ThrottleResult> {
  const database = openPostgres(databaseUrl, { statementTimeoutMs: 600_000 });
  const prefix = benchPrefix('throttle');
  const broker = new BrokerConnection({ url, name: 'bench-throttle', logger: silentLogger() });
  const programs: ProgramProcess[] = [];
  const ports: number[] = [];
  try {
    const insert = async (id: string, webhookUrl: string, maxPerSecond?: number) => {
      const merchant = { id, publicKey: `pk_live_${randomBytes(12).toString('hex')}`, endpoints: [{ id: newEndpointId(), url: webhookUrl, enabled: true, secret: `whsec_${randomBytes(24).toString('base64')}`, secretIssuedAt: new Date().toISOString(), ...(maxPerSecond ? { maxPerSecond } : {}) }] } as Merchant;
      const [publicKey, webhook, sealed] = columnsOf(merchant, new SecretBox(KEY));
      await database.query('INSERT INTO merchants (id, public_key, endpoints, secrets, version) VALUES ($1, $2, $3::jsonb, $4, 1)', [id, publicKey, webhook, sealed]);
    };
    await insert('m_throttled', `${throttled.url}/ok`, RATE);
    for (let i = 0; i < OTHERS; i++) await insert(`m_other_${i}`, `${others.url}/ok`);
    await broker.open();
    const channel = await broker.createChannel();
    await declareIntake(channel, prefix);
    await channel.close();
    for (let i = 0; i < 3; i++) {
      const port = await freePort();
      ports.push(port);
      programs.push(startProgram('dispatcher/main.js', { ...databaseProgramEnv(url, prefix, databaseUrl, KEY, port), ALLOW_PRIVATE_TARGETS: 'true', LOG_LEVEL: 'warn', DELIVERY_LOG: 'off' }));
    }
    for (const port of ports) await until('dispatcher ready', async () => (await fetch(`http://127.0.0.1:${port}/readyz`).catch(() => undefined))?.status === 200, 60_000, 50);
    const { events } = topologyNames(prefix);
    const publish = (merchantId: string, i: number, sentAt = Date.now()) =>
      broker.publish(events, 'charge.completed', eventBody(merchantId, sentAt), { persistent: true, contentType: 'application/json', messageId: `evt_${merchantId}_${i}` });
    // The other merchants' traffic, paced, until `stop()`.
    const steady = () => {
      let stopped = false;
      let i = 0;
      const started = performance.now();
      const done = (async () => {
        while (!stopped) {
          const due = started + (i / OTHERS_RATE) * 1000;
          const wait = due - performance.now();
          if (wait > 1) await new Promise((resolve) => setTimeout(resolve, wait));
          await publish(`m_other_${i % OTHERS}`, i);
          i++;
        }
      })();
      return async () => {
        stopped = true;
        await done;
      };
    };
    const othersP95 = async () => {
      const stats = await others.stats();
      const latencies = Object.entries(stats.merchants).filter(([m]) => m.startsWith('m_other_')).flatMap(([, l]) => l).sort((a, b) => a - b);
      return percentile(latencies, 95);
    };
    // Idle: the others alone.
    await others.reset();
    let stop = steady();
    await new Promise((resolve) => setTimeout(resolve, IDLE_SECONDS * 1000));
    await stop();
    const idleP95Ms = await othersP95();
    log(`throttle: idle p95 of the other merchants ${round(idleP95Ms)} ms`);
    // Loaded: the 10,000 at once, the others beside them.
    await others.reset();
    await throttled.reset();
    stop = steady();
    const started = Date.now();
    for (let i = 0; i < WEBHOOKS; i += 500) await Promise.all(Array.from({ length: Math.min(500, WEBHOOKS - i) }, (_, j) => publish('m_throttled', i + j, started)));
    log(`throttle: ${WEBHOOKS} published in ${Date.now() - started} ms`);
    await until(`${WEBHOOKS} delivered`, async () => (await throttled.count()).count >= WEBHOOKS, 600_000, 1_000);
    const seconds = ((await throttled.count()).last - started) / 1000;
    await stop();
    const loadedP95Ms = await othersP95();
    // Where the others' latency went: one merchant's (2/s, in arrival order) max of every 20 receipts, about 10 s.
    const one = (await others.stats()).merchants.m_other_0 ?? [];
    const runsOf: number[] = [];
    for (let i = 0; i < one.length; i += 20) runsOf.push(Math.max(...one.slice(i, i + 20)));
    log(`throttle: other merchants' max per 10 s of m_other_0: ${runsOf.join(' ')}`);
    const stats = await throttled.stats();
    const arrivals = new Map<number, number>();
    // Arrival = the body's sentAt (`started`, the same for all) + its latency at the receiver.
    for (const latency of stats.merchants.m_throttled ?? []) {
      const second = Math.floor((started + latency) / 1000);
      arrivals.set(second, (arrivals.get(second) ?? 0) + 1);
    }
    let failed = 0;
    for (const port of ports) failed += (await scrape(port, 'webhooks_failed_total')) ?? 0;
    return { seconds: round(seconds, 1), busiestSecond: Math.max(...arrivals.values()), failed, idleP95Ms: round(idleP95Ms), loadedP95Ms: round(loadedP95Ms), othersMaxPer10s: runsOf };
  } finally {
    for (const program of programs.reverse()) await program.stop();
    await broker.close().catch(() => {});
    await deleteTopology(url, prefix);
    await database.close();
  }
}

export function throttleSection(result: ThrottleResult): string {
  return `## 21. Throttle per endpoint (issue 55), measured ${new Date().toISOString().slice(0, 10)}

\`npm run bench -- throttle\` (bench/throttle.ts; one run, minutes): ${WEBHOOKS.toLocaleString('en')} webhooks published at once to a
merchant with \`maxPerSecond\` ${RATE}, three dispatcher processes, ten other merchants receiving ${OTHERS_RATE}/s between them.

| figure | wanted | measured |
|---|---|---|
| first publish to last receipt | ${WEBHOOKS / RATE} s ± 10 % | ${result.seconds} s |
| busiest second at the throttled receiver | ≤ ${Math.round(RATE * 1.1)} | ${result.busiestSecond} |
| webhooks failed | 0 | ${result.failed} |
| other merchants' p95, idle run (${IDLE_SECONDS} s, same rate) | | ${result.idleP95Ms} ms |
| other merchants' p95, beside the throttled batch | within 20 % of idle | ${result.loadedP95Ms} ms (${round(result.loadedP95Ms / Math.max(1, result.idleP95Ms), 2)} × idle) |

One other merchant's longest latency in each 10 s of the batch, ms: ${result.othersMaxPer10s.join(', ')}.
`;
}
