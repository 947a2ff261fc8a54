/**
 * Scenario `tracing` (issue 32): what tracing costs the dispatcher. In one round, the same events
 * through the dispatcher each way: the build before tracing (BENCH_BASELINE_DIST, a built
 * checkout's dist/), this build with no OTEL variable (tracing off), and this build with tracing on,
 * sampling every delivery (always_on), a tenth of them, or none (always_off: spans made, the
 * merchant's traceparent sent, nothing exported), exporting over http/protobuf to a local collector
 * stub in its own process.
 */
import { type ChildProcess, fork } from 'node:child_process';
import { once } from 'node:events';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { ReceiverProcess } from './processes.js';
import { dispatcherCpu } from './throughput.js';

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

/** One round: each variant once, in the order given (rounds rotate it). Rates in deliveries/s, CPU in µs per delivery (warm window). */
export async function tracingRound(
  url: string,
  receiver: ReceiverProcess,
  collector: Collector,
  warmup: number,
  total: number,
  concurrency: number,
  order: Variant[],
  baselineDist: string | undefined,
) {
  const result: Record<string, number> = {};
  for (const variant of order) {
    if (variant === 'before' && !baselineDist) continue;
    await collector.reset();
    const sampling = SAMPLING[variant];
    const env: Record<string, string> = sampling ? { OTEL_EXPORTER_OTLP_ENDPOINT: collector.endpoint, ...sampling } : {};
    const script = variant === 'before' ? join(baselineDist!, 'apps/dispatcher/main.js') : undefined;
    const { warm } = await dispatcherCpu(url, receiver, warmup, total, concurrency, env, script);
    result[`${variant}Rate`] = warm.rate;
    result[`${variant}CpuUs`] = warm.cpuUs;
    // The dispatcher's own thread, and the rest (the export worker, V8's helpers).
    result[`${variant}MainUs`] = warm.mainUs;
    result[`${variant}OthersUs`] = warm.othersUs;
    if (variant === 'on') {
      // The dispatcher's stop exported what it still held: spans received per delivery made.
      const { spans } = await collector.stats();
      result.onSpansPerDelivery = spans / (warmup + total);
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
}
