import { BrokerConnection, BrokerUnavailableError } from '../../libs/broker/index.js';
import { openPostgres, type Queryable } from '../../libs/delivery-store/index.js';
import { FailedStore, ResendService, type ResendTarget } from '../../libs/failed/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { FileMerchantDirectory, webhookSettingsOf } from '../../libs/merchants/index.js';
import { topologyNames } from '../../libs/topology/index.js';
import type { CliConfig } from './config.js';
import { NothingMatchedError, UsageError } from './command.js';

/**
 * A queue or stream the command reads is not on the broker (reply 404): the programs never ran with
 * this TOPOLOGY_PREFIX here. Operator commands check rather than declare, so they cannot create a
 * queue with arguments that clash with the programs' (FAILED_RETENTION).
 */
class MissingQueueError extends Error {
  override name = 'MissingQueueError';

  constructor(queue: string, prefix: string) {
    super(`${queue} does not exist on this broker: no dispatcher or API has declared the topology of TOPOLOGY_PREFIX=${prefix} here`);
  }
}

/** How long a command tries to reach RabbitMQ before it exits 1. */
export const CLI_BROKER_DEADLINE_MS = 10_000;

/**
 * Connects without declaring anything, then checks that the queues the command uses exist. Runs the
 * command and always disconnects.
 */
export async function withBroker<T>(config: CliConfig, queues: string[], run: (broker: BrokerConnection) => Promise<T>): Promise<T> {
  const broker = new BrokerConnection({ url: config.RABBITMQ_URL, name: 'webhooks-cli', logger: silentLogger() });
  await broker.open(CLI_BROKER_DEADLINE_MS);
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

/**
 * The failure index in PostgreSQL (DATABASE_URL), for the `failed` commands: the same rows and
 * claims the API's resends use, so an operator's resend is the merchant's resend. `merchant` reads
 * what a resend checks of the merchant (its webhook on, its events), where the programs read it.
 */
export async function withFailures<T>(config: CliConfig, run: (store: FailedStore, merchant: (id: string) => Promise<ResendTarget>) => Promise<T>): Promise<T> {
  if (!config.DATABASE_URL) throw new UsageError('failed commands need DATABASE_URL: failed webhooks and their resends are kept in PostgreSQL');
  const database = openPostgres(config.DATABASE_URL, { maxConnections: 2, applicationName: 'webhooks-cli failed' });
  try {
    return await run(new FailedStore(database), (id) => resendTargetOf(config, database, id));
  } finally {
    await database.close();
  }
}

/** The merchant as the programs hold it: from MERCHANTS_FILE when set, else its row in PostgreSQL. */
async function resendTargetOf(config: CliConfig, database: Queryable, merchantId: string): Promise<ResendTarget> {
  const endpoints = config.MERCHANTS_FILE
    ? new FileMerchantDirectory(config.MERCHANTS_FILE, silentLogger()).byId(merchantId)?.endpoints
    : await webhookSettingsOf(database, merchantId);
  if (endpoints === undefined) throw new NothingMatchedError(`no merchant ${merchantId} in ${config.MERCHANTS_FILE ?? 'the merchants table (DATABASE_URL)'}`);
  return { id: merchantId, endpoints };
}

/** The API's own resend, over the CLI's broker connection and database; drained before the broker closes. */
export async function withResend<T>(config: CliConfig, store: FailedStore, run: (resend: ResendService) => Promise<T>): Promise<T> {
  return withBroker(config, [topologyNames(config.TOPOLOGY_PREFIX).dispatch], async (broker) => {
    const resend = new ResendService(broker, store, config.TOPOLOGY_PREFIX, silentLogger());
    try {
      return await run(resend);
    } finally {
      await resend.drain();
    }
  });
}
