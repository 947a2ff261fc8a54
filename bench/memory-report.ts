/** The memory sections of BENCHMARKS.md: start-up with many merchants (7b), a dead merchant (12), the soak (13). */
import { benchDeadMerchant } from './dead-merchant.js';
import { benchMerchantsStartup } from './merchants.js';
import { log, medianOf, url } from './settings.js';
import { benchSoak } from './soak.js';
import { round } from './stats.js';

/** `npm run bench -- merchants`. */
export async function merchantsSection(): Promise<string> {
  const count = Number(process.env.BENCH_MERCHANTS ?? 100_000);
  const r = await medianOf('merchants', () => benchMerchantsStartup(url, count));
  return `## 7b. A dispatcher's start-up with ${count.toLocaleString('en')} merchants in PostgreSQL

${count.toLocaleString('en')} merchants in a fresh database (each with its own URL, public key and sealed secret; a third with an
events filter; filled in ${r.fillSeconds} s), then the dispatcher as deployed (\`dist/apps/dispatcher/main.js\`, its own
process, \`DELIVERY_LOG=off\`) from spawn to \`/readyz\` 200: it loads the table a page of 10,000 rows at a time and
opens every secret before it takes a delivery.

| | ready in ms | resident MB | V8 heap used MB |
|---|---|---|---|
| **${count.toLocaleString('en')} merchants** | **${Math.round(r.readyMs)}** | **${r.rssMb}** | ${r.heapUsedMb} |
| an empty table | ${Math.round(r.emptyReadyMs)} | ${r.emptyRssMb} | ${r.emptyHeapUsedMb} |

What the directory holds, loaded in the bench's own process between two full collections: **${r.directoryHeapMb} MB** of heap.
The process's resident memory grows by ${round(r.rssMb - r.emptyRssMb)} MB: that figure also holds what loading left for the
collector and the heap V8 keeps after it. Targets: ready in ≤ 5,000 ms, the merchants held in ≤ 100 MB.
`;
}

/** `npm run bench -- dead-merchant`. */
export async function deadMerchantSection(): Promise<string> {
  const options = {
    waits: Number(process.env.BENCH_DEAD_WAITS ?? 1_000_000),
    okRate: Number(process.env.BENCH_DEAD_OK_RATE ?? 200),
    deadRate: Number(process.env.BENCH_DEAD_RATE ?? 300),
    idleSeconds: Number(process.env.BENCH_DEAD_IDLE_SECONDS ?? 60),
    seconds: Number(process.env.BENCH_DEAD_SECONDS ?? 240),
  };
  const beforeDist = process.env.BENCH_BEFORE_DIST;
  const before = beforeDist ? await benchDeadMerchant(url, { ...options, dist: beforeDist }) : undefined;
  if (before) log(`dead-merchant before: ${JSON.stringify(before)}`);
  const r = await benchDeadMerchant(url, options);
  log(`dead-merchant: ${JSON.stringify(r)}`);
  const line = (name: string, x: typeof r) =>
    `| ${name} | ${x.idle.p50} / ${x.idle.p95} | ${x.dead.p50} / ${x.dead.p95} | ${(x.dead.p95 / x.idle.p95).toFixed(2)} | ${x.dispatchMax.toLocaleString('en')} | ${x.handChanges.toLocaleString('en')} | ${x.rssBytesPerWait} | ${x.startupMs} |`;
  return `## 19. A dead merchant: rows, not broker churn (issue 54)

\`npm run bench -- dead-merchant\` (bench/dead-merchant.ts; \`BENCH_DEAD_WAITS\` ${options.waits.toLocaleString('en')}, \`BENCH_DEAD_OK_RATE\` ${options.okRate},
\`BENCH_DEAD_RATE\` ${options.deadRate}, \`BENCH_DEAD_IDLE_SECONDS\` ${options.idleSeconds}, \`BENCH_DEAD_SECONDS\` ${options.seconds}; \`BENCH_BEFORE_DIST\`: an earlier build's \`dist\`, run first).
One dispatcher, ten healthy merchants at ${options.okRate} events/s and ${options.deadRate} events/s for an eleventh that answers (idle), then
the same with the eleventh's share going to a merchant answering 503, ${options.waits.toLocaleString('en')} waits of it inserted (due over the next 30 min). Latency: publish to receipt, ms, healthy merchants.

| build | idle p50 / p95 | dead p50 / p95 | p95 ratio | dispatch max | hand-backs + rewrites | RSS bytes per added wait | second dispatcher start ms |
|---|---|---|---|---|---|---|---|
${before ? `${line('before', before)}\n` : ''}${line('after', r)}
`;
}

/** `npm run bench -- soak`. */
export async function soakSection(): Promise<string> {
  const seconds = Number(process.env.BENCH_SOAK_SECONDS ?? 900);
  const runs = await benchSoak(url, 300, seconds, process.env.BENCH_BEFORE_DIST);
  log(`soak: ${JSON.stringify(runs)}`);
  const at = (run: (typeof runs)[number], second: number) => run.samples.reduce((best, s) => (Math.abs(s.second - second) < Math.abs(best.second - second) ? s : best));
  const marks = [60, 300, 540, 720, seconds].filter((m) => m <= seconds);
  return `## 13. Soak: 300 events/s for ${seconds / 60} min, 10 of 50 merchants flaky (issue 29)

One dispatcher at the defaults (schedule 5s,5m,30m,2h,5h,10h,10h) receives 300 events/s for 50 merchants; 10 of them
answer 503 nine times in ten, so their webhooks pile up as waits (rows of webhook_waits). Resident memory (VmRSS) and
\`webhooks_retry_waiting\` (summed over the tiers) sampled every 15 s.${runs.length > 1 ? ' "before" is the build named by BENCH_BEFORE_DIST, run at the same time beside it on its own topology.' : ''}
\`BENCH_BEFORE_DIST=<dist of an earlier build> npm run bench -- soak\` (\`BENCH_SOAK_SECONDS\`, default 900).

| build | ${marks.map((m) => `${Math.round(m / 60)} min: RSS MB / waiting`).join(' | ')} |
|---|${marks.map(() => '---').join('|')}|
${runs.map((run) => `| ${run.name} | ${marks.map((m) => `${at(run, m).rssMb} / ${at(run, m).waiting.toLocaleString('en')}`).join(' | ')} |`).join('\n')}
`;
}
