import { merchantIdSchema } from '../../libs/contracts/index.js';
import { type Database, type Queryable } from '../../libs/delivery-store/index.js';
import { lineLogger, silentLogger } from '../../libs/logger/index.js';
import { type Actor, EndpointLimitError, EndpointNotFoundError, EndpointUrlTakenError, InvalidSettingsError, MerchantNotFoundError, MerchantSettings, openMerchants, SecretBox } from '../../libs/merchants/index.js';
import { announcer, OperationalPublisher } from '../../libs/operational/index.js';
import { topologyNames } from '../../libs/topology/index.js';
import { withBroker, withPostgres } from './broker.js';
import { type CliContext, NothingMatchedError, UsageError, writeLine } from './command.js';

/** Changes made here are the CLI's in the audit trail. */
export const CLI_ACTOR: Actor = { actor: 'cli' };

/**
 * The admin API's MerchantSettings on the same table: a change made here follows the same rules and reaches
 * every program the same way (NOTIFY). A URL written is https outside development mode, not private unless allowed.
 * `run` also gets the database, where a view reads the rate each endpoint is sent at now (withCurrentRate).
 * `access`: a write opens RabbitMQ before it writes, to announce what it changes; a read needs only
 * PostgreSQL, so that merchants can be read while the broker is down.
 */
export async function withSettings<T>(ctx: CliContext, access: 'read' | 'write', run: (settings: MerchantSettings, database: Queryable) => Promise<T>): Promise<T> {
  const needs = 'merchants commands need DATABASE_URL (and SECRETS_KEY): merchants live in PostgreSQL. Beside npm start, use the admin API or the portal';
  if (!ctx.config.DATABASE_URL) throw new UsageError(needs);
  if (!ctx.config.SECRETS_KEY) throw new UsageError('merchants commands need SECRETS_KEY, the key the programs seal webhook secrets with');
  // Stops a command on a database `webhooks migrate` has not brought to this release's schema.
  await withDatabase(ctx, needs, async () => {});
  const opened = await openMerchants(ctx.config, silentLogger(), { applicationName: 'webhooks-cli', startStallMs: 10_000, connectTimeoutMs: 10_000 });
  const policy = { allowHttp: ctx.config.WEBHOOKS_DEV, allowPrivateTargets: ctx.config.ALLOW_PRIVATE_TARGETS };
  const settings = (announce?: ReturnType<typeof announcer>) =>
    new MerchantSettings(opened.merchants, policy, undefined, announce, ctx.config.MAX_ENDPOINTS_PER_MERCHANT);
  try {
    // Without an announcer: a read changes nothing to announce.
    if (access === 'read') return await run(settings(), opened.database);
    // Opened before the write: with RabbitMQ down a write is refused whole (exit 1, nothing written)
    // rather than made and left unannounced.
    return await withBroker(ctx.config, [], async (broker) => {
      // A webhook turned off or on here is announced as the admin API does (endpoint.disabled / endpoint.enabled).
      // The write stands when its event cannot be published (a wrong TOPOLOGY_PREFIX: no operational exchange): said on stderr.
      const told = lineLogger((line) => writeLine(ctx.stderr, `webhooks: ${line}`));
      const announce = announcer(new OperationalPublisher(broker, topologyNames(ctx.config.TOPOLOGY_PREFIX).operational, silentLogger(), { backoffMs: [500, 1_000], deadlineMs: 10_000 }), told);
      return run(settings(announce), opened.database);
    });
  } catch (err) {
    // Refused as by the admin API: an unknown merchant or endpoint exits 3; what was asked (a field, the
    // endpoint limit, a URL the merchant already sends to) exits 2, as a bad option.
    if (err instanceof MerchantNotFoundError || err instanceof EndpointNotFoundError) throw new NothingMatchedError(err.message);
    if (err instanceof InvalidSettingsError || err instanceof EndpointLimitError || err instanceof EndpointUrlTakenError) throw new UsageError(err.message);
    throw err;
  } finally {
    await opened.close();
  }
}

/** DATABASE_URL for one command, once its schema is this release's (`webhooks migrate`); `needs` says why it is needed. */
export async function withDatabase<T>(ctx: CliContext, needs: string, run: (database: Database) => Promise<T>): Promise<T> {
  // A person waits at the prompt: a slow connect (a busy server) is waited for longer than the programs do.
  return withPostgres(ctx.config.DATABASE_URL, needs, { maxConnections: 1, applicationName: 'webhooks-cli', connectTimeoutMs: 10_000 }, run);
}

/** The merchants' database and the key their secrets are sealed with, for a command that needs no directory. */
export async function withSealedStore<T>(ctx: CliContext, run: (database: Database, box: SecretBox) => Promise<T>): Promise<T> {
  const needs = 'this command needs DATABASE_URL and SECRETS_KEY (reseal: and SECRETS_KEY_PREVIOUS, the key it replaces)';
  if (!ctx.config.DATABASE_URL || !ctx.config.SECRETS_KEY) throw new UsageError(needs);
  const box = new SecretBox(ctx.config.SECRETS_KEY, ctx.config.SECRETS_KEY_PREVIOUS ? [ctx.config.SECRETS_KEY_PREVIOUS] : []);
  return withDatabase(ctx, needs, (database) => run(database, box));
}

export function merchantId([id]: string[]): string {
  if (id === undefined || id.trim() === '') throw new UsageError('give the merchant id');
  return id;
}

/**
 * The id of a merchant `merchants set` may create: the admin API's rule, so that its routes, the portal
 * and `webhooks log` can name it. The other commands take any id, so that one made before can be deleted.
 */
export function newMerchantId(args: string[]): string {
  const id = merchantId(args);
  const parsed = merchantIdSchema.safeParse(id);
  if (!parsed.success) throw new UsageError(parsed.error.issues[0]!.message);
  return id;
}
