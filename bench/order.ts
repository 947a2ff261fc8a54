/**
 * Issue 55: what order per reference costs. One dispatcher as deployed (its own process, a retry
 * schedule, so its waits and the order rows in a migrated database of its own) delivers one
 * merchant's events, each with a reference of its own (many references: every webhook is the head
 * of its line), to a receiver answering 204 to all: once with the merchant unordered, once with
 * `orderByReference`, in the same round, alternating which goes first. Rate: deliveries a second
 * over a warm window, as in 1b.
 *
 * `npm run bench -- order` (BENCH_ORDER_WARMUP, default 5,000; BENCH_ORDER_N, default 20,000).
 * BENCH_ORDER_UPSTREAM=1: the events come through the events exchange, so both runs pay the intake
 * check (on by default) as deployed; otherwise straight to `dispatch`, the order's cost alone.
 */
import { cpus, loadavg } from 'node:os';
import type { ReceiverProcess } from './processes.js';
import { median, round } from './stats.js';
import { dispatcherCpu } from './throughput.js';

export interface OrderRound {
  unordered: { rate: number; cpuUs: number };
  ordered: { rate: number; cpuUs: number };
  /** The 1-minute load average at the round's end: the machine is shared. */
  load: number;
}

export interface OrderResult {
  warmup: number;
  total: number;
  concurrency: number;
  /** Through the events exchange (BENCH_ORDER_UPSTREAM=1), each run paying the intake check. */
  upstream: boolean;
  runs: OrderRound[];
}

export async function benchOrder(url: string, receiver: ReceiverProcess, runs: number, log: (line: string) => void): Promise<OrderResult> {
  const warmup = Number(process.env.BENCH_ORDER_WARMUP ?? 5_000);
  const total = Number(process.env.BENCH_ORDER_N ?? 20_000);
  const concurrency = 128;
  const upstream = process.env.BENCH_ORDER_UPSTREAM === '1';
  const result: OrderResult = { warmup, total, concurrency, upstream, runs: [] };
  const once = async (ordered: boolean) => (await dispatcherCpu(url, receiver, warmup, total, concurrency, {}, { upstream, randomKeys: upstream, merchants: [{ id: 'm_bench', url: `${receiver.url}/ok`, endpoint: ordered ? { orderByReference: true } : {} }] })).warm;
  for (let i = 0; i < runs; i++) {
    const orderedFirst = i % 2 === 1;
    const first = await once(orderedFirst);
    const second = await once(!orderedFirst);
    const round = { ...(orderedFirst ? { ordered: first, unordered: second } : { unordered: first, ordered: second }), load: loadavg()[0]! };
    log(`order run ${i + 1}/${runs}: ${JSON.stringify(round)}`);
    result.runs.push(round);
  }
  return result;
}

export function orderSection(r: OrderResult): string {
  const m = (f: (x: OrderRound) => number, digits = 2) => round(median(r.runs.map(f)), digits);
  return `## 22. Order per reference: its cost to throughput (issue 55)

\`BENCH_RUNS=${r.runs.length} npm run bench -- order\` (\`BENCH_ORDER_WARMUP\`=${r.warmup}, \`BENCH_ORDER_N\`=${r.total}). One dispatcher as deployed
(its own process, \`DISPATCH_CONCURRENCY=${r.concurrency}\`, \`RETRY_SCHEDULE=5s\`, a migrated database of its own for its waits and order rows), one
merchant, every event with a reference of its own (many references, so every webhook heads its line), a receiver process
answering 204 to all: the merchant **unordered**, then in the same round with \`orderByReference\` (**ordered**: each webhook's
admission, without its bytes, and its end, beside its delivery record, are one batched call of webhook_order_step() each). Rate:
deliveries a second over the ${r.total.toLocaleString('en')} after the first ${r.warmup.toLocaleString('en')}; CPU from /proc over the same window. Rounds
alternate which goes first.${r.upstream ? ' With `BENCH_ORDER_UPSTREAM=1`: published through the events exchange with random `messageId`s, so both runs pay the intake check (as deployed).' : ''}

| merchant | deliveries/s | dispatcher CPU µs per delivery |
|---|---|---|
| unordered | ${m((x) => x.unordered.rate, 0)} | ${m((x) => x.unordered.cpuUs, 0)} |
| ordered | ${m((x) => x.ordered.rate, 0)} | ${m((x) => x.ordered.cpuUs, 0)} |

Per round, median: ordered ÷ unordered **${m((x) => x.ordered.rate / x.unordered.rate)}×** (target ≥ 0.8); rounds ${r.runs.map((x) => round(x.ordered.rate / x.unordered.rate, 2)).join(', ')}, load average ${r.runs.map((x) => round(x.load, 1)).join(', ')} on ${cpus().length} cores.
`;
}
