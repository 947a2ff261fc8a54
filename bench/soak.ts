/**
 * Issue 29's soak: 300 events/s for 15 minutes to 50 merchants, 10 of them flaky (503 nine times
 * in ten), one dispatcher at the default retry schedule; its resident memory and the webhooks
 * waiting (rows) sampled every 15 s. With BENCH_BEFORE_DIST (a `dist` built from an
 * earlier commit) the same soak runs beside it against that build, at the same time, each on its
 * own topology, so the two see the same machine.
 */
import { join } from 'node:path';
import { BrokerConnection } from '../libs/broker/index.js';
import { silentLogger } from '../libs/logger/index.js';
import { declareIntake, topologyNames } from '../libs/topology/index.js';
import { benchMerchants, benchPrefix, deleteTopology, eventBody, publishPaced, withDatabase } from './fixtures.js';
import { freePort, type ProgramProcess, rssOf, scrape, startProgram, startReceiver, until } from './processes.js';

export interface SoakSample {
  second: number;
  rssMb: number;
  /** Webhooks waiting for their next attempt (the dispatcher's webhooks_waiting gauge). */
  waiting: number;
}

export interface SoakResult {
  name: string;
  samples: SoakSample[];
}

const MERCHANTS = 50;
const FLAKY = 10;

function soakOne(url: string, name: string, dist: string | undefined, receiverUrl: string, rate: number, seconds: number, metricsPort: number): Promise<SoakResult> {
  return withDatabase(`soak_${name}`, (databaseUrl) => soakWith(url, name, dist, receiverUrl, rate, seconds, metricsPort, databaseUrl));
}

async function soakWith(url: string, name: string, dist: string | undefined, receiverUrl: string, rate: number, seconds: number, metricsPort: number, databaseUrl: string): Promise<SoakResult> {
  const prefix = benchPrefix(`soak-${name}`);
  const merchants = Array.from({ length: MERCHANTS }, (_, i) => ({ id: `m_soak_${i}`, url: `${receiverUrl}/${i < FLAKY ? 'flaky' : 'ok'}/${i}` }));
  const broker = new BrokerConnection({ url, name: `bench-soak-${name}`, logger: silentLogger() });
  await broker.open();
  const channel = await broker.createChannel();
  await declareIntake(channel, prefix);
  await channel.close();
  const env = {
    RABBITMQ_URL: url,
    TOPOLOGY_PREFIX: prefix,
    ...(await benchMerchants(databaseUrl, merchants)),
    ALLOW_PRIVATE_TARGETS: 'true',
    METRICS_PORT: String(metricsPort),
    LOG_LEVEL: 'warn',
  };
  const program: ProgramProcess = dist ? startProgram(join(dist, 'apps/dispatcher/main.js'), env) : startProgram('dispatcher/main.js', env);
  const samples: SoakSample[] = [];
  try {
    await until(`${name} dispatcher ready`, async () => (await scrape(metricsPort, 'webhooks_broker_connected')) === 1, 60_000, 200);
    const { events } = topologyNames(prefix);
    await publishPaced(
      rate,
      seconds,
      (i) => broker.publish(events, 'charge.completed', eventBody(merchants[i % MERCHANTS]!.id), { persistent: true, contentType: 'application/json', messageId: `evt_${name}_${i}` }),
      async (second) => void samples.push({ second, rssMb: Math.round(rssOf(program.child.pid!).nowMb), waiting: (await scrape(metricsPort, 'webhooks_waiting')) ?? NaN }),
    );
    return { name, samples };
  } finally {
    await program.stop();
    await broker.close();
    await deleteTopology(url, prefix);
  }
}

export async function benchSoak(url: string, rate: number, seconds: number, beforeDist: string | undefined): Promise<SoakResult[]> {
  const receiver = await startReceiver();
  try {
    const runs = [soakOne(url, 'after', undefined, receiver.url, rate, seconds, await freePort())];
    if (beforeDist) runs.push(soakOne(url, 'before', beforeDist, receiver.url, rate, seconds, await freePort()));
    return await Promise.all(runs);
  } finally {
    await receiver.stop();
  }
}
