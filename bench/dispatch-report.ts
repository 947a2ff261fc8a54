/** The dispatch sections of BENCHMARKS.md: throughput (1), against the reference pipeline (1b), on a cluster (6). */
import { cpus } from 'node:os';
import { clusterAvailable, clusterThroughput, startCluster, stopCluster } from './cluster.js';
import type { ReceiverProcess } from './processes.js';
import { log, medianOf, runs, url } from './settings.js';
import { median, round } from './stats.js';
import { dispatcherCpu, dispatcherThroughputCores, rawBroker, rawClient, referenceThroughput } from './throughput.js';

/** `npm run bench -- throughput`. */
export async function throughputSection(receiver: ReceiverProcess): Promise<string> {
  const N = 20_000;
  const C = 64;
  const r = await medianOf('throughput', async () => {
    // The dispatcher lets half of DISPATCH_CONCURRENCY be in flight to one endpoint, so 2 × C
    // gives it the same C requests in flight to the one receiver as the raw clients.
    const raw = await rawClient(receiver, N, C);
    const dispatcher = await dispatcherThroughputCores(url, receiver, N, 2 * C);
    const round = {
      brokerAlone: await rawBroker(url, N, C),
      undiciAlone: raw.rate,
      dispatcherUndici: dispatcher.rate,
      rawClientCores: raw.cores.client ?? NaN,
      rawReceiverCores: raw.cores.receiver ?? NaN,
      dispatcherCores: dispatcher.cores.dispatcher ?? NaN,
      dispatcherReceiverCores: dispatcher.cores.receiver ?? NaN,
      dispatcherBrokerCores: dispatcher.cores.broker ?? NaN,
    };
    // Ratios within one round: rates swing between rounds on a shared 2-core machine.
    return { ...round, undiciRatio: round.dispatcherUndici / round.undiciAlone };
  });
  return `## 1. Dispatch throughput

${N.toLocaleString('en')} events already in \`dispatch\`, one merchant, a receiver process answering 204 at once;
rate = events / (last receipt − first receipt). ${C} requests in flight to the receiver on every
line: the raw clients run ${C} concurrent loops of signed POSTs, each in a fresh process as the
dispatcher is, with one prebuilt body signed per request; the dispatcher runs with
\`DISPATCH_CONCURRENCY=${2 * C}\`, since it lets half of that be in flight to any one endpoint. The
broker line is the broker alone with prefetch ${C} (consume + JSON.parse + ack, no HTTP). All run in
the same round; rounds alternate.

| what | deliveries/s |
|---|---|
| broker alone (consume + ack) | ${Math.round(r.brokerAlone)} |
| undici alone | ${Math.round(r.undiciAlone)} |
| **dispatcher, undici (default)** | **${Math.round(r.dispatcherUndici)}** |

Cores used (of ${cpus().length}) while the rate was measured, median: raw undici: client ${r.rawClientCores}, receiver
${r.rawReceiverCores}; dispatcher (undici): dispatcher ${r.dispatcherCores}, receiver ${r.dispatcherReceiverCores},
RabbitMQ ${r.dispatcherBrokerCores}.

Dispatcher ÷ raw rate of the client it uses, per round, median: undici **${round(r.undiciRatio * 100, 0)}%** (target ≥ 80%).
The got rows (got alone, dispatcher with \`HTTP_CLIENT=got\`) are gone since 11-28 (issue 54): got was a second HTTP
client with the same behaviour as undici and a quarter of its rate, so it and \`HTTP_CLIENT\` were deleted.
`;
}

/** `npm run bench -- reference`. */
export async function referenceSection(receiver: ReceiverProcess): Promise<string> {
  // Cold: the first W deliveries of a fresh process, V8 still compiling its hot code (the figure
  // measured until 11-25). Warm: the N after them, what a dispatcher that has run a minute pays.
  const W = 20_000;
  const N = 40_000;
  const C = 64;
  let roundNo = 0;
  const r = await medianOf('reference', async () => {
    // Rounds alternate which program goes first, so neither always meets a warmer broker.
    const first = roundNo++ % 2 === 0;
    // The same prefetch as the dispatcher's (twice DISPATCH_CONCURRENCY) and the same requests in flight.
    const reference = first ? await referenceThroughput(url, receiver, W, N, 4 * C, C) : undefined;
    const dispatcher = await dispatcherCpu(url, receiver, W, N, 2 * C);
    const ref = reference ?? (await referenceThroughput(url, receiver, W, N, 4 * C, C));
    const raw = await rawClient(receiver, W, C);
    return {
      dispatcher: dispatcher.warm.rate,
      reference: ref.warm.rate,
      dispatcherCpuUs: dispatcher.warm.cpuUs,
      referenceCpuUs: ref.warm.cpuUs,
      dispatcherMainUs: dispatcher.warm.mainUs,
      referenceMainUs: ref.warm.mainUs,
      dispatcherOthersUs: dispatcher.warm.othersUs,
      referenceOthersUs: ref.warm.othersUs,
      rateRatio: dispatcher.warm.rate / ref.warm.rate,
      cpuRatio: dispatcher.warm.cpuUs / ref.warm.cpuUs,
      dispatcherCold: dispatcher.cold.rate,
      referenceCold: ref.cold.rate,
      dispatcherColdCpuUs: dispatcher.cold.cpuUs,
      referenceColdCpuUs: ref.cold.cpuUs,
      dispatcherColdOthersUs: dispatcher.cold.othersUs,
      referenceColdOthersUs: ref.cold.othersUs,
      coldRateRatio: dispatcher.cold.rate / ref.cold.rate,
      coldCpuRatio: dispatcher.cold.cpuUs / ref.cold.cpuUs,
      undici: raw.rate,
      undiciCpuUs: ((raw.cores.client ?? NaN) / raw.rate) * 1e6,
      undiciRatio: dispatcher.warm.rate / raw.rate,
    };
  });
  return `## 1b. The dispatcher against the program a team would write instead

${(W + N).toLocaleString('en')} events already in a quorum queue, one merchant, the same receiver process. The
**reference pipeline** (bench/reference-pipeline.ts, its own process) consumes at the dispatcher's prefetch, ${4 * C}, parses,
signs HMAC-SHA256 in the Standard Webhooks format with node:crypto, POSTs with undici with ${C} in
flight and acks each delivery; nothing else. The **dispatcher** runs as deployed (its own process,
\`DISPATCH_CONCURRENCY=${2 * C}\`, so ${C} in flight to one endpoint and a prefetch of ${4 * C}; validation, directory, breaker,
bulkhead, metrics and delivery log on). **undici alone**: ${C} loops of signed POSTs, no broker.
All three in the same round; rounds alternate which program goes first.

CPU µs per delivery is the process's user + system time from /proc ÷ deliveries, read by the receiver at the receipt of
exactly the counts that bound a window: **cold**, the first ${W.toLocaleString('en')} deliveries of a fresh process, and
**warm**, the ${N.toLocaleString('en')} after them. A fresh process spends its first seconds compiling its hot code on
V8's background threads; a dispatcher pays that once, and then the warm figure for as long as it runs. The warm figure
is split into the main thread (the event loop: the program's own code, undici, amqplib) and the other threads (V8's
compiler and GC helpers).

| what | cold: deliveries/s | cold: CPU µs per delivery | warm: deliveries/s | warm: CPU µs per delivery | main thread | other threads |
|---|---|---|---|---|---|---|
| undici alone (no broker) | ${Math.round(r.undici)} | ${Math.round(r.undiciCpuUs)} | | | | |
| reference pipeline | ${Math.round(r.referenceCold)} | ${Math.round(r.referenceColdCpuUs)} | ${Math.round(r.reference)} | ${round(r.referenceCpuUs, 1)} | ${round(r.referenceMainUs, 1)} | ${round(r.referenceOthersUs, 1)} |
| **dispatcher** | ${Math.round(r.dispatcherCold)} | ${Math.round(r.dispatcherColdCpuUs)} | **${Math.round(r.dispatcher)}** | **${round(r.dispatcherCpuUs, 1)}** | ${round(r.dispatcherMainUs, 1)} | ${round(r.dispatcherOthersUs, 1)} |

Per round, median, warm: dispatcher ÷ reference rate **${r.rateRatio.toFixed(2)}×** (target ≥ 1.0), CPU per delivery
**${r.cpuRatio.toFixed(2)}×** (target ≤ 1.0); dispatcher ÷ undici alone **${r.undiciRatio.toFixed(2)}×**. Cold: rate
${r.coldRateRatio.toFixed(2)}×, CPU per delivery ${r.coldCpuRatio.toFixed(2)}× (other threads ${round(r.dispatcherColdOthersUs, 1)} µs
against ${round(r.referenceColdOthersUs, 1)}).
`;
}

/** `npm run bench -- cluster`. */
export async function clusterSection(receiver: ReceiverProcess): Promise<string | undefined> {
  if (!clusterAvailable()) {
    log('cluster: skipped (needs the Debian rabbitmq-server and root, as npm run test:cluster)');
  } else {
    const urls = startCluster();
    try {
      const total = 20_000;
      const ones: number[] = [];
      const twos: number[] = [];
      const ratios: number[] = [];
      let cores: Record<string, number> = {};
      for (let i = 0; i < runs; i++) {
        const one = await clusterThroughput(urls, receiver, total, 1, 128);
        const two = await clusterThroughput(urls, receiver, total, 2, 128);
        ones.push(one.rate);
        twos.push(two.rate);
        ratios.push(two.rate / one.rate);
        cores = two.cores;
        log(`cluster run ${i + 1}/${runs}: ${JSON.stringify({ one: one.rate, two: two.rate, oneCores: one.cores, twoCores: two.cores })}`);
      }
      return `## 6. Two dispatchers on a three-node cluster

${total.toLocaleString('en')} events already in \`dispatch\` of a three-node RabbitMQ 3.10 cluster (test/cluster/cluster.sh, all three
nodes on this machine), one merchant, the same receiver; one dispatcher, then two sharing \`dispatch\` as competing consumers,
each with \`DISPATCH_CONCURRENCY=128\` and all three node URLs; rounds alternate.

| dispatchers | deliveries/s |
|---|---|
| 1 | ${Math.round(median(ones))} |
| 2 | ${Math.round(median(twos))} |

Two ÷ one, per round, median: **${round(median(ratios))}x**. Cores used with two dispatchers (of ${cpus().length}):
${Object.entries(cores).map(([k, v]) => `${k} ${v}`).join(', ')} (${round(Object.values(cores).reduce((a, b) => a + b, 0))} in all).
All three broker nodes, the receiver and the dispatchers share this machine's two cores, so a second dispatcher takes CPU
from the first rather than adding any: the ratio is the cost of scaling out on one machine, not what separate machines would
give. Where the time goes: a CPU profile of one dispatcher on the cluster (\`BENCH_PROFILE=1 npm run bench -- cluster\`,
2026-11-23) has the same shape as against the single broker: undici's request path 17-18%, socket writes (writev) 11%,
HMAC-SHA256 in standardwebhooks 6%, GC 5-6%, the dispatcher's own code 11%, amqplib 3%, and 11-13% idle, waiting for
deliveries. Nothing cluster-specific shows up in the process; one dispatcher's rate on the cluster (2,900 to 6,600/s over
the runs so far) moves with how much of the two cores the three broker nodes take at that moment, not with its own work.
`;
    } finally {
      stopCluster();
    }
  }
}
