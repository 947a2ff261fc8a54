import { BrokerConnection, BrokerUnavailableError, redacted } from '../../libs/broker/index.js';
import { type Database, openPostgres, type PostgresOptions } from '../../libs/delivery-store/index.js';
import { CLAIM_LEASE_MS, FailedStore, ResendOutcomeUnknownError, ResendService, ResendStoppedError, type ResendTarget } from '../../libs/failed/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { webhookSettingsOf } from '../../libs/merchants/index.js';
import { checkSchema } from '../../libs/migrations/index.js';
import { NamedError } from '../../libs/runtime/index.js';
import { within } from '../../libs/runtime/timers.js';
import { topologyNames } from '../../libs/topology/index.js';
import type { CliConfig } from './config.js';
import { NothingMatchedError, UsageError } from './command.js';

export const CLI_BROKER_DEADLINE_MS = 10_000;

/**
 * Checks the command's queues rather than declare them: a declare could clash with the programs' arguments
 * (FAILED_RETENTION). Only publish declares (`declare`), what upstream's publish needs.
 */
export async function withBroker<T>(config: CliConfig, queues: string[], run: (broker: BrokerConnection) => Promise<T>, declare?: ConstructorParameters<typeof BrokerConnection>[0]['declare']): Promise<T> {
  const broker = new BrokerConnection({ url: config.RABBITMQ_URL, name: 'webhooks-cli', logger: silentLogger(), declare });
  await broker.open(CLI_BROKER_DEADLINE_MS);
  try {
    for (const queue of queues) {
      const channel = await broker.createChannel();
      try {
        await channel.checkQueue(queue);
      } catch (err) {
        if ((err as { code?: number }).code === 404) {
          throw new Error(`${queue} does not exist on this broker: no dispatcher or API has declared the topology of TOPOLOGY_PREFIX=${config.TOPOLOGY_PREFIX} here`);
        }
        throw new BrokerUnavailableError(`cannot check ${queue}`, { cause: err });
      } finally {
        await channel.close().catch(() => {});
      }
    }
    return await run(broker);
  } finally {
    await broker.close();
  }
}

/**
 * A pool on DATABASE_URL for one command (without it, `needs` is the usage error). Every command but `migrate`
 * (`schema: false`) checks the schema as the programs do, so that one behind names `webhooks migrate`.
 */
export async function withPostgres<T>(url: string | undefined, needs: string, options: PostgresOptions & { schema?: false }, run: (database: Database) => Promise<T>): Promise<T> {
  if (!url) throw new UsageError(needs);
  const { schema, ...settings } = options;
  const database = openPostgres(url, settings);
  try {
    // pg's words name neither the variable nor PostgreSQL; the URL without its password nor its query string.
    await database.query('SELECT 1').catch((err: unknown) => {
      throw new Error(`cannot use the PostgreSQL of DATABASE_URL (${redacted(url).replace(/[?#].*$/, '')}): ${(err as Error)?.message ?? String(err)}`, { cause: err });
    });
    if (schema !== false) await checkSchema(database);
    return await run(database);
  } finally {
    await database.close();
  }
}

/** The failure index the API's resends use; `merchant` reads what a resend checks from the merchants table. */
export async function withFailures<T>(config: CliConfig, run: (store: FailedStore, merchant: (id: string) => Promise<ResendTarget>) => Promise<T>): Promise<T> {
  const needs = 'failed commands need DATABASE_URL: failed webhooks and their resends are kept in PostgreSQL';
  return withPostgres(config.DATABASE_URL, needs, { maxConnections: 2, applicationName: 'webhooks-cli failed' }, (database) =>
    run(new FailedStore(database), async (id) => {
      const endpoints = await webhookSettingsOf(database, id);
      if (endpoints === undefined) throw new NothingMatchedError(`no merchant ${id} in the merchants table (DATABASE_URL)`);
      return { id, endpoints };
    }),
  );
}

/**
 * Resent copies RabbitMQ had not confirmed CLI_BROKER_DEADLINE_MS after the command's work (a memory or disk
 * alarm blocks publishers): they may still be delivered. `cause`: what stopped the work, said too unless it
 * is only that a copy went unconfirmed with nothing resent.
 */
export class ResendsUnconfirmedError extends NamedError {
  constructor(readonly count: number, readonly deadlineMs: number, options: { cause?: unknown } = {}) {
    const cause = options.cause as Error | undefined;
    const onlyUnconfirmed = cause instanceof ResendStoppedError && cause.sent === 0 && cause.cause instanceof ResendOutcomeUnknownError;
    super(
      `RabbitMQ did not confirm ${count} resent ${count === 1 ? 'copy' : 'copies'} within ${deadlineMs} ms (a memory or disk alarm blocks publishers?): ` +
        `${count === 1 ? 'it' : 'they'} may still be delivered; ${count === 1 ? 'its failed webhook stays' : 'their failed webhooks stay'} claimed for ${CLAIM_LEASE_MS / 1000} s, ` +
        'and the dispatcher marks a copy resent when it takes it' +
        (cause === undefined || onlyUnconfirmed ? '' : `; before that: ${cause.message}`),
      options,
    );
  }
}

/**
 * The API's own resend, drained before the broker closes. The drain waits for late confirms, which a
 * blocked broker never sends: bounded, as publish and invalid requeue are, else the command hangs.
 */
export async function withResend<T>(config: CliConfig, store: FailedStore, run: (resend: ResendService) => Promise<T>): Promise<T> {
  return withBroker(config, [topologyNames(config.TOPOLOGY_PREFIX).dispatch], async (broker) => {
    const resend = new ResendService(broker, store, config.TOPOLOGY_PREFIX, silentLogger());
    let stopped: unknown;
    try {
      return await run(resend);
    } catch (err) {
      stopped = err;
      throw err;
    } finally {
      if (!(await within(CLI_BROKER_DEADLINE_MS, resend.drain().then(() => true)))) {
        // Replaces the work's own error, which it quotes.
        throw new ResendsUnconfirmedError(resend.unsettled, CLI_BROKER_DEADLINE_MS, { cause: stopped });
      }
    }
  });
}
