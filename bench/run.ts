/**
 * `npm run bench [scenario …]`: runs the scenarios against the local RabbitMQ with local receiver
 * processes and writes BENCHMARKS.md. Not part of `npm test`. Each figure is the median of
 * BENCH_RUNS runs (default 3); ratios compare figures measured in the same run.
 */
import { writeFileSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import { logOutageSection, logOverheadSection, logQueriesSection, recorderCatchUpSection, recorderSection } from './delivery-log-report.js';
import { clusterSection, referenceSection, throughputSection } from './dispatch-report.js';
import { HISTORY } from './history.js';
import { isolationSection, latencySection, resendSection } from './latency-report.js';
import { deadMerchantSection, merchantsSection, soakSection } from './memory-report.js';
import { startReceiver } from './processes.js';
import { benchRetries, retriesSection } from './retries.js';
import { log, runs, url, want, wanted } from './settings.js';
import { benchSizing } from './sizing.js';
import { benchDirectoryMemory } from './sizing-memory.js';
import { directoryMemorySection, sizingSection } from './sizing-report.js';
import { tracingSection } from './tracing-report.js';

const sections: string[] = [];
const receiver = await startReceiver();
const second = await startReceiver();
try {
  if (want('throughput')) sections.push(await throughputSection(receiver));
  if (want('reference')) sections.push(await referenceSection(receiver));
  if (want('resend')) sections.push(await resendSection());
  if (want('isolation')) sections.push(await isolationSection(receiver, second));
  if (want('latency')) sections.push(await latencySection(receiver));
  if (want('cluster')) {
    const cluster = await clusterSection(receiver);
    if (cluster !== undefined) sections.push(cluster);
  }
  if (want('merchants')) sections.push(await merchantsSection());
  // Issue 53's sizing figures: one run each (a run is minutes), only when asked by name.
  if (wanted.has('sizing')) sections.push(sizingSection(await benchSizing(url, Number(process.env.BENCH_SIZING_WEBHOOKS ?? 100_000))));
  // Issue 54's figures (bench/retries.ts): minutes, only when asked by name.
  if (wanted.has('retries')) sections.push(retriesSection(await benchRetries(url, receiver, runs, log)));
  if (wanted.has('sizing-memory')) sections.push(directoryMemorySection(await benchDirectoryMemory(url, Number(process.env.BENCH_MERCHANTS ?? 100_000))));
  if (want('recorder')) sections.push(await recorderSection());
  if (want('recorder-catchup')) sections.push(await recorderCatchUpSection());
  if (want('log-queries')) sections.push(await logQueriesSection());
  if (want('log-overhead')) sections.push(await logOverheadSection(receiver));
  if (want('tracing')) sections.push(await tracingSection());
  if (want('dead-merchant')) sections.push(await deadMerchantSection());
  if (want('soak')) sections.push(await soakSection());
  if (want('log-outage')) sections.push(await logOutageSection(receiver));
  // Issue 55's figure (bench/order.ts): minutes, only when asked by name.
  if (wanted.has('order')) sections.push((await import('./order.js')).orderSection(await (await import('./order.js')).benchOrder(url, receiver, runs, log)));
  if (want('intake-dedupe')) sections.push(await (await import('./intake-dedupe.js')).intakeDedupeSection(receiver));
  // Minutes: only when asked by name.
  if (wanted.has('waits-on-time')) sections.push(await (await import('./waits-on-time.js')).waitsOnTimeSection(url, runs, log));
  // Issue 55's throttle: minutes, one run, only when asked by name.
  if (wanted.has('throttle')) {
    const { benchThrottle, throttleSection } = await import('./throttle.js');
    sections.push(throttleSection(await benchThrottle(url, receiver, second, log)));
  }
  // Issue 56's fan-out (bench/fanout.ts): minutes, only when asked by name.
  if (wanted.has('fanout')) {
    const { benchFanout, fanoutSection } = await import('./fanout.js');
    sections.push(fanoutSection(await benchFanout(url, receiver, runs, log)));
  }
  // Issue 56's dead endpoint (bench/fanout-dead.ts): ten minutes, only when asked by name.
  if (wanted.has('fanout-dead')) {
    const { benchFanoutDead, fanoutDeadSection } = await import('./fanout-dead.js');
    sections.push(fanoutDeadSection(await benchFanoutDead(url, receiver, log)));
  }
} finally {
  await receiver.stop();
  await second.stop();
}

const machine = `${cpus().length} × ${cpus()[0]?.model ?? 'cpu'}, ${Math.round(totalmem() / 2 ** 30)} GiB, Node ${process.version}`;
const doc = `# Benchmarks

Machine: ${machine}; RabbitMQ 3.10 on 127.0.0.1, sharing the two cores with the programs and the
receivers. Command: \`npm run bench\` (or \`npm run bench -- throughput reference resend index isolation latency journal\`
for some); \`BENCH_RUNS\` runs per scenario (default 3), each figure the median of them, written by
\`bench/run.ts\` on ${new Date().toISOString().slice(0, 10)}. \`BENCH_PROFILE=1\` writes CPU profiles of the
dispatcher to \`profiles/\`.

${sections.join('\n')}
${HISTORY}`;
if (sections.length > 0) {
  writeFileSync(wanted.size === 0 ? 'BENCHMARKS.md' : 'BENCHMARKS.partial.md', doc);
  log(doc);
}
