/**
 * Issue 56: "one endpoint dead for 5 minutes under load while the other two keep their latency".
 * One dispatcher as deployed (its own process, DISPATCH_CONCURRENCY 64, DELIVERY_TIMEOUT_MS 2 s, a
 * retry schedule with its waits in a database of its own) and one merchant with three endpoints
 * that all take the event (/ep1, /ep2, /ep3 of the receiver process), events published at a steady
 * rate through the events exchange for BENCH_DEAD_SECONDS (default 300): first with all three
 * answering 204 (the baseline), then with the third hanging (/hang: the socket held until the
 * dispatcher gives up, the worst a dead server does to in-flight slots). The figure is each of the
 * two live endpoints' publish-to-receipt latency, dead run ÷ baseline, p50 and p95, from the same
 * round.
 *
 * `npm run bench -- fanout-dead` (BENCH_DEAD_RATE events a second, default 50; BENCH_DEAD_SECONDS).
 */
import { cpus, loadavg } from 'node:os';
import type { ReceiverProcess } from './processes.js';
import { round } from './stats.js';
import { type Latency, steadyRun } from './steady.js';

const MERCHANT = 'm_bench_fanout_dead';

export interface FanoutDeadResult {
  rate: number;
  seconds: number;
  baseline: Record<'ep1' | 'ep2', Latency>;
  dead: Record<'ep1' | 'ep2', Latency>;
  load: number[];
}

export async function benchFanoutDead(url: string, receiver: ReceiverProcess, log: (line: string) => void): Promise<FanoutDeadResult> {
  const rate = Number(process.env.BENCH_DEAD_RATE ?? 50);
  const seconds = Number(process.env.BENCH_DEAD_SECONDS ?? 300);
  const load: number[] = [];
  const run = async (third: string, live: number) => {
    // steadyRun publishes one untimed second (`rate` events) before the timed ones.
    const events = rate * seconds + rate;
    const byKey = await steadyRun({
      url,
      rate,
      seconds,
      merchants: [],
      merchantOf: () => MERCHANT,
      receivers: [receiver],
      expectDelivered: () => true,
      seed: [{ id: MERCHANT, url: [`${receiver.url}/ep1`, `${receiver.url}/ep2`, `${receiver.url}${third}`] }],
      expectedDeliveries: events * live,
      waitMs: 300_000,
    });
    load.push(loadavg()[0]!);
    const of = (path: string) => byKey[`${MERCHANT}${path}`] ?? { p50: NaN, p95: NaN, p99: NaN, count: 0 };
    const result = { ep1: of('/ep1'), ep2: of('/ep2') };
    log(`fanout-dead ${third}: ${JSON.stringify(result)} load ${load.at(-1)!.toFixed(1)}`);
    return result;
  };
  const baseline = await run('/ep3', 3);
  const dead = await run('/hang', 2);
  return { rate, seconds, baseline, dead, load };
}

export function fanoutDeadSection(r: FanoutDeadResult): string {
  const row = (name: 'ep1' | 'ep2') =>
    `| ${name} | ${r.baseline[name].p50} / ${r.baseline[name].p95} | ${r.dead[name].p50} / ${r.dead[name].p95} | ${round(r.dead[name].p50 / r.baseline[name].p50, 2)}× / ${round(r.dead[name].p95 / r.baseline[name].p95, 2)}× | ${r.dead[name].count.toLocaleString('en')} |`;
  return `## 23b. Fan-out: one endpoint of three dead for ${r.seconds / 60} minutes under load (issue 56), measured ${new Date().toISOString().slice(0, 10)}

\`BENCH_DEAD_SECONDS=${r.seconds} npm run bench -- fanout-dead\` (bench/fanout-dead.ts). One dispatcher as deployed
(\`DISPATCH_CONCURRENCY=64\`, \`DELIVERY_TIMEOUT_MS=2000\`, \`RETRY_SCHEDULE=30s\`, waits in its own database), one
merchant with three endpoints taking every event, ${r.rate} events a second through the events exchange for ${r.seconds} s:
all three answering 204, then the third hanging (every request held until the dispatcher's 2 s deadline: its
in-flight share held, its circuit opening). Publish-to-receipt latency of the two live endpoints, ms:

| endpoint | all live, p50 / p95 | third dead, p50 / p95 | dead ÷ live | deliveries (dead run) |
|---|---|---|---|---|
${row('ep1')}
${row('ep2')}

Load average (1 min) at the end of each run: ${r.load.map((x) => round(x, 1)).join(', ')} on ${cpus().length} cores.
`;
}
