/**
 * Scenario `tracing` (issue 32): what tracing costs the dispatcher. In one round, the same events
 * through the dispatcher each way, the ways taking turns (tracingRound): the build before tracing
 * (BENCH_BASELINE_DIST, a built checkout's dist/), this build with no OTEL variable (tracing off),
 * and this build with tracing on, sampling every delivery (always_on), a tenth of them, or none
 * (always_off: spans made, the merchant's traceparent sent, nothing exported), exporting over
 * http/protobuf to a local collector stub in its own process.
 */
import { type ChildProcess, fork } from 'node:child_process';
import { once } from 'node:events';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { threadCpuSeconds } from './cpu.js';
import { benchPrefix, deleteTopology, fillDispatch, withDatabase } from './fixtures.js';
import { type ProgramProcess, type ReceiverProcess, until } from './processes.js';
import { startBenchDispatcher } from './throughput.js';

export interface Collector {
  endpoint: string;
  stats(): Promise<{ requests: number; spans: number; bytes: number }>;
  reset(): Promise<void>;
  stop(): Promise<void>;
}

export async function startCollector(): Promise<Collector> {
  const child: ChildProcess = fork(fileURLToPath(new URL('./collector-process.js', import.meta.url)), [], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const [message] = (await once(child, 'message')) as [{ port: number }];
  const endpoint = `http://127.0.0.1:${message.port}`;
  return {
    endpoint,
    async stats() {
      return (await (await fetch(`${endpoint}/stats`)).json()) as Awaited<ReturnType<Collector['stats']>>;
    },
    async reset() {
      await fetch(`${endpoint}/reset`, { method: 'POST' });
    },
    async stop() {
      child.kill('SIGKILL');
      await once(child, 'exit');
    },
  };
}

type Variant = 'before' | 'off' | 'on' | 'tenth' | 'none';

/** The sampler of each way with tracing on; the others run with no OTEL variable. */
const SAMPLING: Partial<Record<Variant, Record<string, string>>> = {
  on: { OTEL_TRACES_SAMPLER: 'always_on' },
  tenth: { OTEL_TRACES_SAMPLER: 'parentbased_traceidratio', OTEL_TRACES_SAMPLER_ARG: '0.1' },
  // Nothing sampled: each delivery's spans are made and its traceparent sent, nothing exported.
  none: { OTEL_TRACES_SAMPLER: 'always_off' },
};

/** How long each way runs at a time before the next takes its turn. */
const SLICE_MS = 500;
/** Events beyond warmup + total in each way's queue: its last turn runs past `total` and must not run dry. */
const SPARE_EVENTS = 25_000;

type Reading = { count: number; cpu: { main: number; others: number } };

interface Way {
  variant: Variant;
  receiver: ReceiverProcess;
  program: ProgramProcess;
  /** The first reading after its warm-up, where its measured window starts. */
  from?: Reading;
  /** Where it ends: the first reading `total` or more deliveries past `from`. */
  to?: Reading;
  /** Its running time (its turns) since `from`. */
  runningMs: number;
}

/**
 * One round: every way at once, each its own dispatcher on its own queue of the same events and
 * its own receiver, all stopped (SIGSTOP) but one at any moment. They take turns of SLICE_MS, in
 * an order that rotates every turn, through each one's first `warmup` deliveries (not measured)
 * and then `total` more. A machine whose speed drifts over seconds (a neighbour's load, its
 * CPU's clock) then slows every way alike, where ways run one after another each met another
 * machine. Rates in deliveries per second of the way's own running time, CPU in µs per delivery.
 */
export function tracingRound(
  url: string,
  receivers: ReceiverProcess[],
  collectors: Collector[],
  warmup: number,
  total: number,
  concurrency: number,
  variants: readonly Variant[],
  baselineDist: string | undefined,
) {
  // The merchants, one per way (each way's own receiver), in a database of the round's own.
  return withDatabase('tracing', async (databaseUrl) => {
    const chosen = variants.filter((v) => v !== 'before' || baselineDist);
    const ways: Way[] = [];
    const prefixes = chosen.map((variant) => benchPrefix(`tracing-${variant}`));
    try {
      // Every queue filled before any dispatcher starts, and warm-ups by turns too: a way stopped
      // for longer (the others' fills took 20 s) found its records' confirms timed out (10 s) the
      // moment it ran again, and paid for it in every figure.
      for (const [i, prefix] of prefixes.entries()) await fillDispatch(url, prefix, warmup + total + SPARE_EVENTS, () => `m_bench_${i}`);
      for (const [i, variant] of chosen.entries()) {
        // Each way its own receiver and collector: what arrives after its turn still counts as its.
        const receiver = receivers[i]!;
        await receiver.reset();
        await collectors[i]!.reset();
        const sampling = SAMPLING[variant];
        // Tracing's cost to first attempts (every one answered 204): no retry schedule.
        const env = { RETRY_SCHEDULE: '', ...(sampling ? { OTEL_EXPORTER_OTLP_ENDPOINT: collectors[i]!.endpoint, ...sampling } : {}) };
        const script = variant === 'before' ? join(baselineDist!, 'apps/dispatcher/main.js') : undefined;
        const program = await startBenchDispatcher(url, prefixes[i]!, receiver, concurrency, databaseUrl, env, script, [{ id: `m_bench_${i}`, url: `${receiver.url}/ok` }]);
        ways.push({ variant, receiver, program, runningMs: 0 });
        // Stopped once it delivers: no way is stopped longer than the others' starts and turns.
        await until(`${variant}'s first delivery`, async () => (await receiver.count()).count > 0, 60_000, 20);
        program.child.kill('SIGSTOP');
      }
      for (let turn = 0; ways.some((w) => !w.to); turn++) {
        for (let k = 0; k < ways.length; k++) {
          const way = ways[(turn + k) % ways.length]!;
          if (way.to) continue;
          if (way.program.child.exitCode !== null) throw new Error(`bench: the ${way.variant} dispatcher exited: ${way.program.output().slice(-500)}`);
          // Read while it is stopped: what its last turn sent has arrived by now.
          const count = (await way.receiver.count()).count;
          const cpu = threadCpuSeconds(way.program.child.pid)!;
          if (count >= warmup) way.from ??= { count, cpu };
          if (way.from && count - way.from.count >= total) {
            way.to = { count, cpu };
            continue;
          }
          const started = performance.now();
          way.program.child.kill('SIGCONT');
          await new Promise((resolve) => setTimeout(resolve, SLICE_MS));
          way.program.child.kill('SIGSTOP');
          if (way.from) way.runningMs += performance.now() - started;
        }
      }
    } finally {
      for (const way of ways) way.program.child.kill('SIGCONT');
      await Promise.all(ways.map((w) => w.program.stop()));
      for (const prefix of prefixes) await deleteTopology(url, prefix);
    }
    const result: Record<string, number> = {};
    for (const way of ways) {
      const from = way.from!;
      const to = way.to!;
      const deliveries = to.count - from.count;
      result[`${way.variant}Rate`] = deliveries / (way.runningMs / 1000);
      // The dispatcher's own thread, and the rest (V8's GC and compiler threads, libuv's).
      result[`${way.variant}MainUs`] = ((to.cpu.main - from.cpu.main) * 1e6) / deliveries;
      result[`${way.variant}OthersUs`] = ((to.cpu.others - from.cpu.others) * 1e6) / deliveries;
      result[`${way.variant}CpuUs`] = result[`${way.variant}MainUs`]! + result[`${way.variant}OthersUs`]!;
      if (way.variant === 'on') {
        // Its stop exported what it still held: spans received per delivery it made.
        const { spans } = await collectors[chosen.indexOf('on')]!.stats();
        result.onSpansPerDelivery = spans / (await way.receiver.count()).count;
      }
    }
    for (const variant of ['on', 'tenth', 'none'] as const) {
      result[`${variant}RateRatio`] = result[`${variant}Rate`]! / result.offRate!;
      result[`${variant}CpuRatio`] = result[`${variant}CpuUs`]! / result.offCpuUs!;
    }
    if (baselineDist) {
      result.offRateRatio = result.offRate! / result.beforeRate!;
      result.offCpuRatio = result.offCpuUs! / result.beforeCpuUs!;
    }
    return result;
  });
}
