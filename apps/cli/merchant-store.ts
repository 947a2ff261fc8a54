import { merchantIdSchema } from '../../libs/contracts/index.js';
import { type Database, type PostgresOptions, type Queryable } from '../../libs/delivery-store/index.js';
import { lineLogger, silentLogger } from '../../libs/logger/index.js';
import { type Actor, EndpointLimitError, EndpointNotFoundError, EndpointUrlTakenError, InvalidSettingsError, MerchantNotFoundError, MerchantSettings, openMerchants, SecretBox } from '../../libs/merchants/index.js';
import { announcer, OperationalPublisher } from '../../libs/operational/index.js';
import { topologyNames } from '../../libs/topology/index.js';
import { withBroker, withPostgres } from './broker.js';
import { type CliContext, NothingMatchedError, UsageError, writeLine } from './command.js';

/** Changes made here are the CLI's in the audit trail. */
export const CLI_ACTOR: Actor = { actor: 'cli' };

/**
 * The admin API's MerchantSettings, so a change follows its rules. A write opens RabbitMQ first, to announce
 * what it changes; a read needs only PostgreSQL, so that merchants can be read while the broker is down.
 */
export async function withSettings<T>(ctx: CliContext, access: 'read' | 'write', run: (settings: MerchantSettings, database: Queryable) => Promise<T>): Promise<T> {
  const needs = 'merchants commands need DATABASE_URL (and SECRETS_KEY): merchants live in PostgreSQL. Beside npm start, use the admin API or the portal';
  if (!ctx.config.DATABASE_URL) throw new UsageError(needs);
  if (!ctx.config.SECRETS_KEY) throw new UsageError('merchants commands need SECRETS_KEY, the key the programs seal webhook secrets with');
  // Refuses a schema that is not this release's.
  await withDatabase(ctx, needs, async () => {});
  const opened = await openMerchants(ctx.config, silentLogger(), { applicationName: 'webhooks-cli', startStallMs: 10_000, connectTimeoutMs: 10_000 });
  const policy = { allowHttp: ctx.config.WEBHOOKS_DEV, allowPrivateTargets: ctx.config.ALLOW_PRIVATE_TARGETS };
  const settings = (announce?: ReturnType<typeof announcer>) =>
    new MerchantSettings(opened.merchants, policy, undefined, announce, ctx.config.MAX_ENDPOINTS_PER_MERCHANT);
  try {
    if (access === 'read') return await run(settings(), opened.database);
    // With RabbitMQ down a write is refused whole rather than made and left unannounced. The write
    // stands when its event cannot be published (a wrong TOPOLOGY_PREFIX): said on stderr.
    return await withBroker(ctx.config, [], async (broker) => {
      const told = lineLogger((line) => writeLine(ctx.stderr, `webhooks: ${line}`));
      const announce = announcer(new OperationalPublisher(broker, topologyNames(ctx.config.TOPOLOGY_PREFIX).operational, silentLogger(), { backoffMs: [500, 1_000], deadlineMs: 10_000 }), told);
      return run(settings(announce), opened.database);
    });
  } catch (err) {
    // As the admin API refuses them: unknown exits 3, what was asked (a field, the limit, a URL taken) exits 2.
    if (err instanceof MerchantNotFoundError || err instanceof EndpointNotFoundError) throw new NothingMatchedError(err.message);
    if (err instanceof InvalidSettingsError || err instanceof EndpointLimitError || err instanceof EndpointUrlTakenError) throw new UsageError(err.message);
    throw err;
  } finally {
    await opened.close();
  }
}

/**
 * DATABASE_URL for one command; a person waits at the prompt, so a slow connect is waited for longer.
 * `settings` add to the pool's (merchants delete: no statement timeout).
 */
export async function withDatabase<T>(ctx: CliContext, needs: string, run: (database: Database) => Promise<T>, settings: PostgresOptions = {}): Promise<T> {
  return withPostgres(ctx.config.DATABASE_URL, needs, { maxConnections: 1, applicationName: 'webhooks-cli', connectTimeoutMs: 10_000, ...settings }, run);
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

/** The admin API's rule for a new merchant's id; the others take any id, so that one made before can be deleted. */
export function newMerchantId(args: string[]): string {
  const id = merchantId(args);
  const parsed = merchantIdSchema.safeParse(id);
  if (!parsed.success) throw new UsageError(parsed.error.issues[0]!.message);
  return id;
}
