/**
 * `npm run bench -- intake-dedupe`: what idempotent intake costs dispatch. The same events through
 * the events exchange (each with its own messageId, so every one is checked and recorded as a
 * first sight) to the dispatcher as deployed, with INTAKE_DEDUPE_WINDOW=24h and with it off (0),
 * in the same round, rounds alternating which goes first.
 */
import type { ReceiverProcess } from './processes.js';
import { log, medianOf, runs, url } from './settings.js';
import { dispatcherCpu } from './throughput.js';

async function round(receiver: ReceiverProcess, warmup: number, total: number, concurrency: number, checkFirst: boolean) {
  const run = async (window: '24h' | '0') => (await dispatcherCpu(url, receiver, warmup, total, concurrency, { INTAKE_DEDUPE_WINDOW: window }, true)).warm;
  const first = await run(checkFirst ? '24h' : '0');
  const second = await run(checkFirst ? '0' : '24h');
  const [check, off] = checkFirst ? [first, second] : [second, first];
  return { checkRate: check.rate, offRate: off.rate, checkCpuUs: check.cpuUs, offCpuUs: off.cpuUs, rateRatio: check.rate / off.rate, cpuRatio: check.cpuUs / off.cpuUs };
}

export async function intakeDedupeSection(receiver: ReceiverProcess): Promise<string> {
  const W = Number(process.env.BENCH_WARMUP ?? 20_000);
  const N = Number(process.env.BENCH_EVENTS ?? 40_000);
  const C = 64;
  let n = 0;
  const r = await medianOf('intake-dedupe', () => round(receiver, W, N, 2 * C, n++ % 2 === 0));
  log(`intake-dedupe: ${JSON.stringify(r)}`);
  return `## 20. Idempotent intake: the check's cost to dispatch

Command: \`npm run bench -- intake-dedupe\` (${runs} runs, medians). ${(W + N).toLocaleString('en')} events published through the
events exchange, each with its own \`messageId\` (so each is checked, and its key inserted, as a first sight), one
merchant, the same receiver, the dispatcher as deployed (\`DISPATCH_CONCURRENCY=${2 * C}\`, a retry schedule, the
delivery log on), measured over the ${N.toLocaleString('en')} deliveries after the first ${W.toLocaleString('en')} (warm), with
\`INTAKE_DEDUPE_WINDOW=24h\` (the default) and \`0\` (off), in the same round, rounds alternating which goes first.
The key checks are batched: one statement per batch of what arrived while the last one ran (two statements at
once), with the repeats dropped meanwhile counted on their keys.

| intake check | deliveries/s | dispatcher CPU µs per delivery |
|---|---|---|
| off (\`0\`) | ${Math.round(r.offRate)} | ${Math.round(r.offCpuUs)} |
| on (\`24h\`) | ${Math.round(r.checkRate)} | ${Math.round(r.checkCpuUs)} |

Per round, median: with ÷ without the check, rate **${r.rateRatio.toFixed(2)}×** (target ≥ 0.9), CPU per delivery ${r.cpuRatio.toFixed(2)}×.
`;
}
