import type { BrokerConnection } from '../../libs/broker/index.js';
import { parseDuration } from '../../libs/config/index.js';
import { type Database, openPostgres } from '../../libs/delivery-store/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { type Actor, MerchantSettings, openMerchants, SecretBox, type UrlPolicy } from '../../libs/merchants/index.js';
import { checkSchema } from '../../libs/migrations/index.js';
import { announcer, OperationalPublisher } from '../../libs/operational/index.js';
import { topologyNames } from '../../libs/topology/index.js';
import { withBroker } from './broker.js';
import { type CliContext, UsageError } from './command.js';

/**
 * Operators' side of the admin API: the same MerchantSettings on the same PostgreSQL table, so a
 * change made here follows the same rules and reaches every program the same way (NOTIFY).
 */
export async function withSettings<T>(ctx: CliContext, policy: UrlPolicy, run: (settings: MerchantSettings) => Promise<T>): Promise<T> {
  if (!ctx.config.DATABASE_URL) {
    throw new UsageError('merchants commands need DATABASE_URL (and SECRETS_KEY): merchants live in PostgreSQL. Beside npm start, use the admin API or the portal');
  }
  if (!ctx.config.SECRETS_KEY) throw new UsageError('merchants commands need SECRETS_KEY, the key the programs seal webhook secrets with');
  // Stops a command on a database `webhooks migrate` has not brought to this release's schema.
  await withDatabase(ctx.config.DATABASE_URL, async () => {});
  const opened = await openMerchants({ ...ctx.config, MERCHANTS_FILE: undefined }, silentLogger(), { applicationName: 'webhooks-cli', startStallMs: 10_000, connectTimeoutMs: 10_000 });
  try {
    return await withBroker(ctx.config, [], async (broker: BrokerConnection) => {
      // A webhook turned off or on here is announced as the admin API does (endpoint.disabled / endpoint.enabled).
      const announce = announcer(new OperationalPublisher(broker, topologyNames(ctx.config.TOPOLOGY_PREFIX).operational, silentLogger(), { backoffMs: [500, 1_000] }), silentLogger());
      return run(new MerchantSettings(opened.writable!, policy, undefined, announce, ctx.config.MAX_ENDPOINTS_PER_MERCHANT));
    });
  } finally {
    await opened.close();
  }
}

/** One connection to DATABASE_URL, once its schema is this release's (`webhooks migrate`); closed after. */
export async function withDatabase<T>(url: string, run: (database: Database) => Promise<T>): Promise<T> {
  // A person waits at the prompt: a slow connect (a busy server) is waited for longer than the programs do.
  const database = openPostgres(url, { maxConnections: 1, applicationName: 'webhooks-cli', connectTimeoutMs: 10_000 });
  try {
    await checkSchema(database);
    return await run(database);
  } finally {
    await database.close();
  }
}

/** The merchants' database and the key their secrets are sealed with, for a command that needs no directory. */
export async function withSealedStore<T>(ctx: CliContext, run: (database: Database, box: SecretBox) => Promise<T>): Promise<T> {
  if (!ctx.config.DATABASE_URL || !ctx.config.SECRETS_KEY) throw new UsageError('this command needs DATABASE_URL and SECRETS_KEY (reseal: and SECRETS_KEY_PREVIOUS, the key it replaces)');
  const box = new SecretBox(ctx.config.SECRETS_KEY, ctx.config.SECRETS_KEY_PREVIOUS ? [ctx.config.SECRETS_KEY_PREVIOUS] : []);
  return withDatabase(ctx.config.DATABASE_URL, (database) => run(database, box));
}

/** Changes made here are the CLI's in the audit trail. */
export const CLI_ACTOR: Actor = { actor: 'cli' };

/** The rules for a URL written now: https outside development mode, no private address literal unless allowed. */
export function urlPolicy(ctx: CliContext): UrlPolicy {
  return { allowHttp: ctx.config.WEBHOOKS_DEV, allowPrivateTargets: ctx.config.ALLOW_PRIVATE_TARGETS };
}

/**
 * A URL that is not being changed was accepted when it was written, under the rules of that time
 * and place (a development machine, ALLOW_PRIVATE_TARGETS): turning a webhook off or narrowing its
 * events must not fail on it. Only what changes is checked.
 */
export const KEEP_STORED_URL: UrlPolicy = { allowHttp: true, allowPrivateTargets: true };

/** The merchant id argument, given and not blank. */
export function merchantId([id]: string[]): string {
  if (id === undefined || id.trim() === '') throw new UsageError('give the merchant id');
  return id;
}

/** --grace of a rotation: a duration up to 30 days, or 0 (a leaked secret stops at once), in seconds. */
export function graceSecondsOf(grace: string): number {
  const graceMs = grace.trim() === '0' ? 0 : parseDuration(grace);
  if (graceMs === undefined || graceMs > 30 * 86_400_000) throw new UsageError('--grace takes a duration up to 30d (e.g. 24h), or 0');
  return Math.round(graceMs / 1000);
}
