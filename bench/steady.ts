/**
 * Scenarios 4 and 5: events published at a steady rate through the events exchange, with the
 * dispatcher running in its own process; the receivers measure publish-to-receipt latency.
 */
import { BrokerConnection } from '../libs/broker/index.js';
import { silentLogger } from '../libs/logger/index.js';
import { declareIntake, topologyNames } from '../libs/topology/index.js';
import { type BenchMerchant, benchMerchants, benchPrefix, deleteTopology, eventBody, withDatabase } from './fixtures.js';
import { type ReceiverProcess, startProgram, until } from './processes.js';
import { percentile } from './stats.js';

export interface Latency {
  p50: number;
  p95: number;
  p99: number;
  count: number;
}

function latency(values: number[]): Latency {
  const sorted = [...values].sort((a, b) => a - b);
  return { p50: percentile(sorted, 50), p95: percentile(sorted, 95), p99: percentile(sorted, 99), count: sorted.length };
}

/**
 * Publishes `rate` events per second for `seconds`; event i goes to merchant `merchantOf(i)`.
 * Returns the latencies seen by each receiver, per merchant.
 */
export async function steadyRun(options: {
  url: string;
  rate: number;
  seconds: number;
  merchants: Array<{ id: string; url: string }>;
  merchantOf: (i: number) => string;
  receivers: ReceiverProcess[];
  expectDelivered: (merchantId: string) => boolean;
  concurrency?: number;
  timeoutMs?: number;
  /** More of the dispatcher's environment (e.g. DELIVERY_LOG). */
  env?: Record<string, string>;
  /** Runs once publishing reaches this second (not awaited: publishing keeps its pace). */
  at?: Array<{ second: number; run: () => unknown }>;
  /** The topology prefix to use (a recorder started beforehand reads the same deliveries stream). */
  prefix?: string;
  /** Runs once every webhook was received, before the dispatcher stops and the topology goes. */
  afterDelivered?: () => Promise<void>;
  /** How long to wait for every delivery after the last publish. */
  waitMs?: number;
  /** Merchants of the caller's (with several endpoints) instead of those made from `merchants`. */
  seed?: BenchMerchant[];
  /** Deliveries expected at the receivers, where an event may make several (fan-out). */
  expectedDeliveries?: number;
}): Promise<Record<string, Latency>> {
  // Merchants and waits (a hanging merchant's webhooks wait as rows) are in PostgreSQL: the case's own database unless given.
  if (options.env?.DATABASE_URL) return steadyWith(options);
  return withDatabase('steady', (databaseUrl) => steadyWith({ ...options, env: { ...options.env, DATABASE_URL: databaseUrl } }));
}

async function steadyWith(options: Parameters<typeof steadyRun>[0]): Promise<Record<string, Latency>> {
  const prefix = options.prefix ?? benchPrefix('steady');
  const broker = new BrokerConnection({ url: options.url, name: 'bench-upstream', logger: silentLogger() });
  await broker.open();
  const channel = await broker.createChannel();
  await declareIntake(channel, prefix);
  await channel.close();
  for (const receiver of options.receivers) await receiver.reset();
  const program = startProgram('dispatcher/main.js', {
    RABBITMQ_URL: options.url,
    TOPOLOGY_PREFIX: prefix,
    RETRY_SCHEDULE: '30s',
    DISPATCH_CONCURRENCY: String(options.concurrency ?? 64),
    DELIVERY_TIMEOUT_MS: String(options.timeoutMs ?? 2_000),
    ALLOW_PRIVATE_TARGETS: 'true',
    METRICS_PORT: '0',
    LOG_LEVEL: 'info',
    ...options.env,
    ...(await benchMerchants(options.env!.DATABASE_URL!, options.seed ?? options.merchants)),
  });
  // One untimed second first: the dispatcher process is fresh and its code not yet optimised.
  const warmup = options.rate;
  const total = options.rate * options.seconds + warmup;
  try {
    await until('dispatcher consuming', () => program.output().includes('dispatcher consuming'), 15_000);
    const { events } = topologyNames(prefix);
    const started = performance.now();
    const confirms: Promise<void>[] = [];
    const hooks = [...(options.at ?? [])].sort((a, b) => a.second - b.second);
    for (let i = 0; i < total; i++) {
      while (hooks.length > 0 && i >= warmup + hooks[0]!.second * options.rate) void hooks.shift()!.run();
      // Pace against the clock, not with sleeps per message: batches of 1 ms worth of events.
      const due = started + (i / options.rate) * 1000;
      const wait = due - performance.now();
      if (wait > 1) await new Promise((resolve) => setTimeout(resolve, wait));
      confirms.push(broker.publish(events, 'charge.completed', eventBody(options.merchantOf(i), Date.now(), i < warmup), { persistent: true, contentType: 'application/json', messageId: `evt_${i}` }));
      if (confirms.length >= 500) await Promise.all(confirms.splice(0));
    }
    await Promise.all(confirms);
    const expected = options.expectedDeliveries ?? Array.from({ length: total }, (_, i) => options.merchantOf(i)).filter(options.expectDelivered).length;
    await until(
      'steady deliveries',
      async () => {
        let count = 0;
        for (const receiver of options.receivers) count += (await receiver.stats()).count;
        return count >= expected;
      },
      options.waitMs ?? 120_000,
      100,
    );
    await options.afterDelivered?.();
    const result: Record<string, Latency> = {};
    for (const receiver of options.receivers) {
      for (const [merchant, values] of Object.entries((await receiver.stats()).merchants)) result[merchant] = latency(values);
    }
    return result;
  } finally {
    await program.stop();
    await broker.close();
    await deleteTopology(options.url, prefix);
  }
}
