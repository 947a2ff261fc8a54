import { BrokerConnection, BrokerUnavailableError } from '../../libs/broker/index.js';
import { FailedIndex, ResendService } from '../../libs/failed/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { topologyNames } from '../../libs/topology/index.js';
import type { CliConfig } from './config.js';
import { MissingQueueError } from './errors.js';

/**
 * Connects without declaring anything, then checks that the queues the command uses exist. Runs the
 * command and always disconnects.
 */
export async function withBroker<T>(config: CliConfig, queues: string[], run: (broker: BrokerConnection) => Promise<T>): Promise<T> {
  const broker = new BrokerConnection({ url: config.RABBITMQ_URL, name: 'webhooks-cli', logger: silentLogger() });
  await broker.open(10_000);
  try {
    await requireQueues(broker, config.TOPOLOGY_PREFIX, queues);
    return await run(broker);
  } finally {
    await broker.close();
  }
}

/** A passive declare per queue: reply 404 is an answer (the queue is missing), not a crash. */
async function requireQueues(broker: BrokerConnection, prefix: string, queues: string[]): Promise<void> {
  for (const queue of queues) {
    const channel = await broker.createChannel();
    try {
      await channel.checkQueue(queue);
    } catch (err) {
      if ((err as { code?: number }).code === 404) throw new MissingQueueError(queue, prefix);
      throw new BrokerUnavailableError(`cannot check ${queue}`, { cause: err });
    } finally {
      await channel.close().catch(() => {});
    }
  }
}

export interface ResendSession {
  index: FailedIndex;
  resend: ResendService;
  close(): Promise<void>;
}

/**
 * The API's own index and resend service, so an operator's resend is the merchant's resend: same
 * entries, same resolution entry, seen by every API replica.
 */
export async function openResendSession(broker: BrokerConnection, prefix: string, timeoutMs = 120_000): Promise<ResendSession> {
  const logger = silentLogger();
  const index = new FailedIndex(broker, topologyNames(prefix).failed, logger);
  await index.start();
  const resend = new ResendService(broker, index, prefix, logger);
  const session = {
    index,
    resend,
    close: async () => {
      await resend.drain();
      await index.stop();
    },
  };
  const deadline = Date.now() + timeoutMs;
  while (!index.ready) {
    if (Date.now() > deadline) {
      await session.close();
      throw new BrokerUnavailableError(`the failed stream was not read up to now within ${timeoutMs / 1000} s`);
    }
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return session;
}
