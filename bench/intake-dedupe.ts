/**
 * `npm run bench -- intake-dedupe`: what idempotent intake costs dispatch. The same events through
 * the events exchange (each with its own messageId, so every one is checked and recorded as a
 * first sight) to the dispatcher as deployed, with INTAKE_DEDUPE_WINDOW=24h and with it off (0),
 * in the same round, rounds alternating which goes first. On a shared machine the rate of a run
 * swings with its neighbours' load far more than the check moves it, so the figure is the median
 * of each round's own ratio (its two runs back to back), with every round's ratio shown.
 * As in steady state: the keys are digests (random places in the index, as UUIDs), and with the
 * check on the day before's partition already holds BENCH_PRIOR_KEYS (default 1,000,000) keys, each
 * new key looked up among them; with none, every lookup met an empty partition.
 */
import { loadavg } from 'node:os';
import type { Database } from '../libs/delivery-store/index.js';
import { dayOf, ensurePartition } from '../libs/delivery-store/schema.js';
import { migrate } from '../libs/migrations/index.js';
import type { ReceiverProcess } from './processes.js';
import { log, runs, url } from './settings.js';
import { median, round as roundTo } from './stats.js';
import { dispatcherCpu } from './throughput.js';

interface Round {
  checkRate: number;
  offRate: number;
  checkCpuUs: number;
  offCpuUs: number;
  rateRatio: number;
  cpuRatio: number;
}

const PRIOR_KEYS = Number(process.env.BENCH_PRIOR_KEYS ?? 1_000_000);

/** Migrates, then adds the day before's keys of the bench's merchant, first seen within the window, none of them the bench's. */
async function migrateWithPriorKeys(db: Database): Promise<void> {
  await migrate(db);
  if (PRIOR_KEYS <= 0) return;
  await ensurePartition(db, 'intake_keys', dayOf(new Date(Date.now() - 86_400_000)));
  await db.query(
    `INSERT INTO intake_keys (day, merchant_id, webhook_id, first_seen_at)
     SELECT date_trunc('day', now() - interval '1 day', 'UTC'), 'm_bench', md5('prior_' || i), greatest(now() - interval '23 hours', date_trunc('day', now() - interval '1 day', 'UTC'))
     FROM generate_series(1, $1::int) AS i`,
    [PRIOR_KEYS],
  );
  await db.query('VACUUM ANALYZE intake_keys');
}

async function round(receiver: ReceiverProcess, warmup: number, total: number, concurrency: number, checkFirst: boolean): Promise<Round> {
  const run = async (window: '24h' | '0') =>
    (await dispatcherCpu(url, receiver, warmup, total, concurrency, { INTAKE_DEDUPE_WINDOW: window }, { upstream: true, randomKeys: true, migrateWith: window === '0' ? undefined : migrateWithPriorKeys })).warm;
  const first = await run(checkFirst ? '24h' : '0');
  const second = await run(checkFirst ? '0' : '24h');
  const [check, off] = checkFirst ? [first, second] : [second, first];
  return { checkRate: check.rate, offRate: off.rate, checkCpuUs: check.cpuUs, offCpuUs: off.cpuUs, rateRatio: check.rate / off.rate, cpuRatio: check.cpuUs / off.cpuUs };
}

export async function intakeDedupeSection(receiver: ReceiverProcess): Promise<string> {
  const W = Number(process.env.BENCH_WARMUP ?? 20_000);
  const N = Number(process.env.BENCH_EVENTS ?? 40_000);
  const C = 64;
  const rounds: Round[] = [];
  const loads: number[] = [];
  for (let i = 0; i < runs; i++) {
    loads.push(loadavg()[0]!);
    rounds.push(await round(receiver, W, N, 2 * C, i % 2 === 0));
    log(`intake-dedupe round ${i + 1}/${runs} (load ${loads.at(-1)!.toFixed(1)}): ${JSON.stringify(rounds.at(-1))}`);
  }
  loads.push(loadavg()[0]!);
  const mid = (key: keyof Round) => median(rounds.map((r) => r[key]));
  const list = (key: keyof Round) => rounds.map((r) => r[key].toFixed(2)).join(', ');
  const sorted = (key: keyof Round) => rounds.map((r) => r[key]).sort((a, b) => a - b);
  const spread = (key: keyof Round) => `${sorted(key)[0]!.toFixed(2)}..${sorted(key).at(-1)!.toFixed(2)}`;
  const above = rounds.filter((r) => r.rateRatio >= 0.9).length;
  log(`intake-dedupe: rate ratio ${mid('rateRatio').toFixed(2)} (${spread('rateRatio')}), cpu ratio ${mid('cpuRatio').toFixed(2)}, load ${Math.min(...loads).toFixed(1)}..${Math.max(...loads).toFixed(1)}`);
  return `## 20. Idempotent intake: the check's cost to dispatch

Command: \`npm run bench -- intake-dedupe\` (${runs} rounds). ${(W + N).toLocaleString('en')} events published through the
events exchange, each with its own \`messageId\` (a digest: so each is checked, and its key inserted, as a first sight, at a
random place in the index), with ${PRIOR_KEYS.toLocaleString('en')} keys of the day before in the check's table (\`BENCH_PRIOR_KEYS\`), one
merchant, the same receiver, the dispatcher as deployed (\`DISPATCH_CONCURRENCY=${2 * C}\`, a retry schedule, the
delivery log on), measured over the ${N.toLocaleString('en')} deliveries after the first ${W.toLocaleString('en')} (warm), with
\`INTAKE_DEDUPE_WINDOW=24h\` (the default) and \`0\` (off) back to back in each round, rounds alternating which goes
first. Load average (1 min) ${Math.min(...loads).toFixed(1)} to ${Math.max(...loads).toFixed(1)} on the machine's cores.

| intake check | deliveries/s (median of rounds) | dispatcher CPU µs per delivery |
|---|---|---|
| off (\`0\`) | ${Math.round(mid('offRate'))} | ${Math.round(mid('offCpuUs'))} |
| on (\`24h\`) | ${Math.round(mid('checkRate'))} | ${Math.round(mid('checkCpuUs'))} |

Median of the rounds' own ratios, with ÷ without the check: rate **${roundTo(mid('rateRatio')).toFixed(2)}×** (target ≥ 0.9; ${above} of
${runs} rounds at or above it), CPU per delivery ${roundTo(mid('cpuRatio')).toFixed(2)}×. Each round's rate ratio: ${list('rateRatio')};
CPU ratio: ${list('cpuRatio')}.
`;
}
