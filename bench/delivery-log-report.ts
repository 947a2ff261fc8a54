/** The delivery log sections of BENCHMARKS.md: the recorder (8, 8b), queries (9), its cost to dispatch (10), PostgreSQL stopped (11). */
import { logQueries, recorderCatchUp, recorderThroughput } from './delivery-log.js';
import { logOutage, logOverheadRound } from './log-outage.js';
import type { ReceiverProcess } from './processes.js';
import { log, medianOf, url } from './settings.js';

/** `npm run bench -- recorder`. */
export async function recorderSection(): Promise<string> {
  const total = Number(process.env.BENCH_RECORDS ?? 200_000);
  const r = await medianOf('recorder', () => recorderThroughput(url, total));
  return `## 8. Delivery log: recorder into PostgreSQL

${total.toLocaleString('en')} delivery records already on \`deliveries\` (200 per stream message, as the writer batches them
under load; four records per webhook, each with a 90-byte payload and a 19-byte response body), then one recorder storing them all into the local
PostgreSQL 15 (a fresh database): **${r.recordsPerSecond.toLocaleString('en')} records/s** (${r.seconds} s), target 20,000/s.
Each transaction stores up to 100 stream messages with one statement (one array per column, zipped by \`ROWS FROM\`) and
the next offset.
`;
}

/** `npm run bench -- recorder-catchup`. */
export async function recorderCatchUpSection(): Promise<string> {
  const total = Number(process.env.BENCH_RECORDS ?? 1_000_000);
  const r = await medianOf('recorder-catchup', () => recorderCatchUp(url, total));
  return `## 8b. Delivery log: the recorder's memory in a catch-up

${total.toLocaleString('en')} delivery records already on \`deliveries\` (${r.streamMb} MB in the stream: 1 KB payloads and 512-byte
response bodies, as after an outage of PostgreSQL), then the recorder as deployed (\`dist/apps/recorder/main.js\`, its own
process, defaults) storing them all into a fresh database: **peak resident memory ${r.peakRssMb} MB** (VmHWM), ${r.recordsPerSecond.toLocaleString('en')} records/s
(${r.seconds} s, process start included). What it holds is bounded by its read-ahead (200 stream messages, and reading
stops past 32 MB until half is stored) and its batch (100 messages, 8 MB), not by the backlog.
`;
}

/** `npm run bench -- log-queries`. */
export async function logQueriesSection(): Promise<string> {
  const attempts = Number(process.env.BENCH_ATTEMPTS ?? 10_000_000);
  // BENCH_LOG_DATABASE=<name> keeps the dataset in that database for the next runs (drop it after).
  const keep = process.env.BENCH_LOG_DATABASE || undefined;
  const r = await medianOf('log-queries', () => logQueries(attempts, Number(process.env.BENCH_SAMPLES ?? 1_000), keep));
  return `## 9. Delivery log: queries with ${attempts.toLocaleString('en')} attempts

${attempts.toLocaleString('en')} attempt rows and ${(attempts / 4).toLocaleString('en')} webhooks (1,000 merchants, 7 days, made with
\`generate_series\` in ${r.loadSeconds} s, then VACUUM (ANALYZE); 0 s when reused), 1,000 random merchants and references, through the API's query code:

| query | p50 ms | p99 ms |
|---|---|---|
| a merchant's last 50 webhooks (\`GET /nucleus/webhooks\`) | ${r.latest50P50} | ${r.latest50P99} |
| a merchant's last 50 failed webhooks (\`GET /nucleus/webhooks?status=failed\`; 1 in 50 failed) | ${r.failed50P50} | ${r.failed50P99} |
| one reference's webhooks with every attempt (\`webhooks log --reference\`: one statement) | ${r.referenceP50} | ${r.referenceP99} |
| one webhook by id alone, with every attempt (\`GET /nucleus/webhooks/{webhookId}\`) | ${r.detailByIdP50} | ${r.detailByIdP99} |

Target p99 <= 20 ms.
`;
}

/** `npm run bench -- log-overhead`. */
export async function logOverheadSection(receiver: ReceiverProcess): Promise<string> {
  const W = 20_000;
  const N = 20_000;
  const C = 64;
  let roundNo = 0;
  const r = await medianOf('log-overhead', () => logOverheadRound(url, receiver, W, N, 2 * C, roundNo++ % 2 === 0));
  return `## 10. Delivery log: its cost to dispatch

${(W + N).toLocaleString('en')} events already in \`dispatch\`, one merchant, the same receiver, the dispatcher as deployed
(\`DISPATCH_CONCURRENCY=${2 * C}\`), measured over the ${N.toLocaleString('en')} deliveries after the first ${W.toLocaleString('en')} (warm, as in 1b), with \`DELIVERY_LOG=on\` (each settled delivery's record on the deliveries stream,
confirmed before its ack) and \`off\`, in the same round, rounds alternating which goes first. The recorder is another
process and is not running here: this is what recording costs the dispatcher and the broker.

| delivery log | deliveries/s | dispatcher CPU µs per delivery |
|---|---|---|
| off | ${Math.round(r.offRate)} | ${Math.round(r.offCpuUs)} |
| on | ${Math.round(r.onRate)} | ${Math.round(r.onCpuUs)} |

Per round, median: on ÷ off rate **${r.rateRatio.toFixed(2)}×** (target ≥ 0.95), CPU per delivery **${r.cpuRatio.toFixed(2)}×**.
`;
}

/** `npm run bench -- log-outage`. */
export async function logOutageSection(receiver: ReceiverProcess): Promise<string> {
  const rate = 500;
  const phases = { beforeS: 30, outageS: Number(process.env.BENCH_OUTAGE_SECONDS ?? 120), afterS: 30 };
  const r = await logOutage(url, receiver, { rate, ...phases });
  log(`log-outage: ${JSON.stringify(r)}`);
  return `## 11. Delivery log: PostgreSQL stopped under load

${rate} events/s through \`webhooks.events\` for ${phases.beforeS + phases.outageS + phases.afterS} s with the dispatcher (log on) and the recorder
running; after ${phases.beforeS} s PostgreSQL stops answering for ${phases.outageS} s (a proxy in front of it drops every
connection and refuses new ones; the shared PostgreSQL itself keeps running). Publish-to-receipt latency by phase, one run:

| phase | p50 ms | p99 ms |
|---|---|---|
| before | ${r.beforeP50} | ${r.beforeP99} |
| PostgreSQL down | ${r.duringP50} | ${r.duringP99} |
| after | ${r.afterP50} | ${r.afterP99} |

After PostgreSQL came back the log held every webhook sent before then (the outage's backlog) within **${r.catchUpSeconds} s**
(target 30 s), and every webhook of the run (${r.webhooks.toLocaleString('en')} of ${r.expected.toLocaleString('en')}; the run
went on ${phases.afterS} s after the outage) ${r.allStoredSeconds} s after it came back: ${r.records.toLocaleString('en')} records,
and ${r.notOnce} webhook(s) whose log does not show exactly the one attempt made.
`;
}
