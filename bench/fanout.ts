/**
 * Issue 56: what fan-out costs. One dispatcher as deployed (its own process, merchants in
 * PostgreSQL, a retry schedule so its waits are rows in the same database) delivers one merchant's
 * events to the bench receiver: in the same round, a merchant with 1 endpoint and one with 5
 * endpoints that all match the event (distinct URLs, /ep1 to /ep5), rounds alternating which goes
 * first. An event to the second is fanned out: each endpoint's delivery walked from the one
 * message in the dispatcher's process, the original acked once all five are done; so its cost is
 * the fan-out plus five deliveries, against one delivery.
 *
 * Each run has two phases (kept from when the fan-out copied each endpoint's delivery back to
 * `dispatch`, behind every original still there, which a window of deliveries counted at the
 * receiver would have cut in two): the warm-up events, published before the
 * dispatcher starts and all delivered; then the dispatcher is stopped (SIGSTOP, well under its
 * 15 s heartbeat), the measured events are published, its CPU is read from /proc and it is resumed.
 * The window runs from the resume to the receipt of the last delivery (the receiver reads /proc
 * then): every delivery of the measured events, on a full queue as in 1b.
 *
 * `npm run bench -- fanout` (BENCH_FANOUT_WARMUP events, default 2,000; BENCH_FANOUT_N, default 6,000).
 */
import { randomBytes } from 'node:crypto';
import { cpus, loadavg } from 'node:os';
import { openPostgres } from '../libs/delivery-store/index.js';
import { type Merchant, newEndpointId, SecretBox } from '../libs/merchants/index.js';
import { columnsOf } from '../libs/merchants/rows.js';
import { threadCpuSeconds } from './cpu.js';
import { benchPrefix, databaseProgramEnv, deleteTopology, fillDispatch, withDatabase } from './fixtures.js';
import { freePort, type ReceiverProcess, startProgram, until } from './processes.js';
import { median, round } from './stats.js';

const KEY = randomBytes(32);
const MERCHANT = 'm_bench_fanout';
const CONCURRENCY = 128;

export interface FanoutRun {
  /** Deliveries a second, from the resume to the last receipt. */
  rate: number;
  /** Dispatcher CPU (all its threads) per event, and per delivery (the same over `endpoints`). */
  cpuUsPerEvent: number;
  cpuUsPerDelivery: number;
  /** Of cpuUsPerEvent: the main thread (the program's own JavaScript). */
  mainUsPerEvent: number;
}

export interface FanoutRound {
  one: FanoutRun;
  five: FanoutRun;
  /** The 1-minute load average at the round's end: the machine is shared. */
  load: number;
}

export interface FanoutResult {
  warmup: number;
  total: number;
  runs: FanoutRound[];
}

/** The merchant, written as the admin API writes it: `endpoints` receivers on distinct URLs, all taking charge.completed. */
async function insertMerchant(databaseUrl: string, receiver: ReceiverProcess, endpoints: number): Promise<void> {
  const merchant: Merchant = {
    id: MERCHANT,
    publicKey: `pk_test_${randomBytes(12).toString('hex')}`,
    endpoints: Array.from({ length: endpoints }, (_, i) => ({
      id: newEndpointId(),
      url: `${receiver.url}/ep${i + 1}`,
      enabled: true,
      secret: `whsec_${randomBytes(24).toString('base64')}`,
      secretIssuedAt: new Date().toISOString(),
      // Half filter by name, half take every event: both match the bench's charge.completed.
      ...(i % 2 === 0 ? { events: ['charge.completed' as const] } : {}),
    })),
  } as Merchant;
  const database = openPostgres(databaseUrl, { statementTimeoutMs: 60_000 });
  try {
    const [publicKey, webhook, sealed] = columnsOf(merchant, new SecretBox(KEY));
    await database.query('INSERT INTO merchants (id, public_key, endpoints, secrets, version) VALUES ($1, $2, $3::jsonb, $4, 1)', [MERCHANT, publicKey, webhook, sealed]);
  } finally {
    await database.close();
  }
}

/** Waits until `pid` has used no more than a clock tick in 250 ms: the warm-up's acks and records settled. */
async function settled(pid: number): Promise<void> {
  const deadline = Date.now() + 10_000;
  let before = threadCpuSeconds(pid);
  while (Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 250));
    const now = threadCpuSeconds(pid);
    if (!before || !now) return;
    if (now.main + now.others - (before.main + before.others) <= 0.01) return;
    before = now;
  }
}

/** One run: a fresh database, queues and dispatcher, the merchant with `endpoints` endpoints. */
function once(url: string, receiver: ReceiverProcess, endpoints: number, warmup: number, total: number): Promise<FanoutRun> {
  return withDatabase('fanout', async (databaseUrl) => {
    await insertMerchant(databaseUrl, receiver, endpoints);
    const prefix = benchPrefix('fanout');
    await fillDispatch(url, prefix, warmup, () => MERCHANT);
    await receiver.reset();
    const port = await freePort();
    const program = startProgram('dispatcher/main.js', {
      ...databaseProgramEnv(url, prefix, databaseUrl, KEY, port),
      RETRY_SCHEDULE: '5s',
      DISPATCH_CONCURRENCY: String(CONCURRENCY),
      ALLOW_PRIVATE_TARGETS: 'true',
      LOG_LEVEL: 'warn',
    });
    const pid = program.child.pid!;
    const end = (warmup + total) * endpoints;
    try {
      await receiver.watch(pid, [end]);
      await until('the warm-up delivered', async () => (await receiver.count()).count >= warmup * endpoints, 300_000, 50);
      await settled(pid);
      process.kill(pid, 'SIGSTOP');
      let cpu: { main: number; others: number };
      let from: number;
      try {
        // Behind the warm-up's: the measured events, each with a messageId of its own.
        await fillDispatch(url, prefix, total, () => MERCHANT, { firstIndex: warmup });
        cpu = threadCpuSeconds(pid)!;
        from = performance.timeOrigin + performance.now();
      } finally {
        process.kill(pid, 'SIGCONT');
      }
      await until('every delivery', async () => (await receiver.count()).count >= end, 600_000, 50);
      const { marks } = await receiver.count();
      const last = marks.find((m) => m.count === end);
      if (!last) throw new Error(`bench: the receiver did not mark delivery ${end}`);
      const cpuUs = (last.main + last.others - cpu.main - cpu.others) * 1e6;
      const deliveries = total * endpoints;
      return {
        rate: deliveries / ((last.at - from) / 1000),
        cpuUsPerEvent: cpuUs / total,
        cpuUsPerDelivery: cpuUs / deliveries,
        mainUsPerEvent: ((last.main - cpu.main) * 1e6) / total,
      };
    } finally {
      await program.stop();
      await deleteTopology(url, prefix);
    }
  });
}

export async function benchFanout(url: string, receiver: ReceiverProcess, runs: number, log: (line: string) => void): Promise<FanoutResult> {
  const warmup = Number(process.env.BENCH_FANOUT_WARMUP ?? 2_000);
  const total = Number(process.env.BENCH_FANOUT_N ?? 6_000);
  const result: FanoutResult = { warmup, total, runs: [] };
  for (let i = 0; i < runs; i++) {
    const fiveFirst = i % 2 === 1;
    const first = await once(url, receiver, fiveFirst ? 5 : 1, warmup, total);
    const second = await once(url, receiver, fiveFirst ? 1 : 5, warmup, total);
    const round_ = { ...(fiveFirst ? { five: first, one: second } : { one: first, five: second }), load: loadavg()[0]! };
    log(`fanout run ${i + 1}/${runs}: ${JSON.stringify(round_)} ratio ${(round_.five.cpuUsPerEvent / round_.one.cpuUsPerEvent).toFixed(2)}`);
    result.runs.push(round_);
  }
  return result;
}

export function fanoutSection(r: FanoutResult): string {
  const m = (f: (x: FanoutRound) => number, digits = 0) => round(median(r.runs.map(f)), digits);
  const ratio = (x: FanoutRound) => x.five.cpuUsPerEvent / x.one.cpuUsPerEvent;
  return `## 23. Fan-out: an event to 5 endpoints against 1 (issue 56), measured ${new Date().toISOString().slice(0, 10)}

\`BENCH_RUNS=${r.runs.length} npm run bench -- fanout\` (bench/fanout.ts; \`BENCH_FANOUT_WARMUP\`=${r.warmup}, \`BENCH_FANOUT_N\`=${r.total} events). One dispatcher as
deployed (its own process, \`DISPATCH_CONCURRENCY=${CONCURRENCY}\`, \`RETRY_SCHEDULE=5s\`, merchants and waits in a migrated database of its
own), one merchant with **1** endpoint, then in the same round one with **5** endpoints on distinct URLs of the receiver process
(204 to all), every one matching the event (three by an \`events\` filter naming it, two without a filter). With 5, the
dispatcher walks each endpoint's delivery from the one message in its process (apps/dispatcher/stages/fan-out.ts) and acks
the original once all five are done. Each run delivers its ${r.warmup.toLocaleString('en')} warm-up events first, then the
dispatcher is stopped (SIGSTOP), the ${r.total.toLocaleString('en')} measured events are queued, its CPU is read from /proc and it is resumed;
the window runs to the receipt of the last delivery, so it holds every delivery of them. Rounds alternate which goes first.

| merchant | deliveries/s | dispatcher CPU µs per event | per delivery | of which main thread, per event |
|---|---|---|---|---|
| 1 endpoint | ${m((x) => x.one.rate)} | ${m((x) => x.one.cpuUsPerEvent)} | ${m((x) => x.one.cpuUsPerDelivery)} | ${m((x) => x.one.mainUsPerEvent)} |
| 5 endpoints | ${m((x) => x.five.rate)} | ${m((x) => x.five.cpuUsPerEvent)} | ${m((x) => x.five.cpuUsPerDelivery)} | ${m((x) => x.five.mainUsPerEvent)} |

Per round, median: CPU per event, 5 endpoints ÷ 1, **${m(ratio, 2)}×** (target ≤ 5); rounds ${r.runs.map((x) => round(ratio(x), 2)).join(', ')}, load average ${r.runs.map((x) => round(x.load, 1)).join(', ')} on ${cpus().length} cores.
`;
}
