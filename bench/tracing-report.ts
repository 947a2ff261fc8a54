/** The tracing section of BENCHMARKS.md: its cost to dispatch (14). */
import { startReceiver } from './processes.js';
import { medianOf, url } from './settings.js';
import { startCollector, tracingRound } from './tracing.js';

/** `npm run bench -- tracing`. */
export async function tracingSection(): Promise<string> {
  // A longer window than the other sections: at 20,000 deliveries a second 20,000 are a second,
  // where one scavenge or a neighbour's burst moves a ratio by several hundredths.
  const W = 20_000;
  const N = Number(process.env.BENCH_TRACING_N ?? 80_000);
  const C = 64;
  const baseline = process.env.BENCH_BASELINE_DIST;
  const variants = ['before', 'off', 'on', 'tenth', 'none'] as const;
  // Each way its own receiver and collector (see tracingRound).
  const receivers = await Promise.all(variants.map(() => startReceiver()));
  const collectors = await Promise.all(variants.map(() => startCollector()));
  try {
    const r = await medianOf('tracing', () => tracingRound(url, receivers, collectors, W, N, 2 * C, variants, baseline));
    const row = (name: string, rate: number | undefined, cpu: number | undefined) => `| ${name} | ${rate === undefined ? '-' : Math.round(rate)} | ${cpu === undefined ? '-' : Math.round(cpu)} |`;
    return `## 14. Tracing: its cost to dispatch (issue 32)

Five ways at once, each its own dispatcher as deployed (\`DISPATCH_CONCURRENCY=${2 * C}\`, delivery log on) with its own
queue of ${(W + N).toLocaleString('en')} events or more, one merchant, its own receiver: the build before tracing (\`BENCH_BASELINE_DIST\`),
this build with no OTEL variable (tracing off: no SDK loaded), this build with every delivery sampled
(\`OTEL_TRACES_SAMPLER=always_on\`) exporting over http/protobuf to a local collector stub in its own process
(bench/collector-process.ts, which answers at once and counts the spans), the same sampling a tenth
(\`parentbased_traceidratio\`, \`OTEL_TRACES_SAMPLER_ARG=0.1\`), and none (\`always_off\`: every span made and the
merchant's \`traceparent\` sent, nothing exported). Three spans per sampled delivery: the delivery, its HTTP attempt and
its record, the SDK's spans, batched by its BatchSpanProcessor and serialised and sent by its OTLP/HTTP exporter on
the dispatcher's thread (issue 46). In a round the ways take turns of half a second, all others stopped (SIGSTOP), the order rotating
every turn, through each way's first ${W.toLocaleString('en')} deliveries (warm-up, as in 1b, not measured) and
${N.toLocaleString('en')} more: rate per second of its own turns, CPU from /proc over the same deliveries. Taking turns
puts every way on the same machine: this machine's speed drifts by a fifth over seconds, and ways run one after
another (the bench before 2026-11-26, sixth session) each met another machine.

| dispatcher | deliveries/s | dispatcher CPU µs per delivery |
|---|---|---|
${row('before tracing', r.beforeRate, r.beforeCpuUs)}
${row('tracing off', r.offRate, r.offCpuUs)}
${row('tracing on, all sampled', r.onRate, r.onCpuUs)}
${row('tracing on, a tenth sampled', r.tenthRate, r.tenthCpuUs)}
${row('tracing on, none sampled', r.noneRate, r.noneCpuUs)}

Per round, median: off ÷ before rate **${r.offRateRatio?.toFixed(2) ?? '-'}×**, CPU per delivery **${r.offCpuRatio?.toFixed(2) ?? '-'}×** (target: unchanged);
all sampled ÷ off rate **${r.onRateRatio!.toFixed(2)}×** (target ≥ 0.75), CPU per delivery **${r.onCpuRatio!.toFixed(2)}×**; a tenth sampled ÷ off
rate **${r.tenthRateRatio!.toFixed(2)}×** (target ≥ 0.95), CPU **${r.tenthCpuRatio!.toFixed(2)}×**; none sampled ÷ off rate **${r.noneRateRatio!.toFixed(2)}×**, CPU **${r.noneCpuRatio!.toFixed(2)}×**. Spans the collector received per delivery, all sampled: ${r.onSpansPerDelivery!.toFixed(2)} (3 expected).
`;
  } finally {
    await Promise.all([...receivers, ...collectors].map((p) => p.stop()));
  }
}
