import { type Command, Option } from 'commander';
import { EVENT_NAMES } from '../../libs/contracts/index.js';
import {
  MAX_PER_SECOND_LIMIT,
  InvalidSettingsError,
  type MerchantInput,
  MerchantNotFoundError,
  type MerchantView,
  firstIssue,
  merchantInputSchema,
  resealSecrets,
  deleteMerchantData,
  listAudit,
} from '../../libs/merchants/index.js';
import { CLI_ACTOR, graceSecondsOf, KEEP_STORED_URL, merchantId, urlPolicy, withDatabase, withSealedStore, withSettings } from './merchant-store.js';
import { declareEndpoints } from './endpoints.js';
import { action } from './command.js';
import { type CliContext, type CliIo, writeLine } from './context.js';
import { NothingMatchedError, UsageError } from './errors.js';
import { EXIT } from './help-text.js';
import { formatTable } from './table.js';

function table(views: MerchantView[]): string {
  return formatTable(
    ['MERCHANT', 'PUBLIC KEY', 'ENABLED', 'EVENTS', 'ORDER', 'PREVIOUS SECRET UNTIL', 'MAX/S', 'URL'],
    views.map((v) => [
      v.id,
      v.publicKey,
      v.webhook ? String(v.webhook.enabled) : 'no webhook',
      v.webhook ? v.webhook.events.join(',') : '-',
      v.webhook ? (v.webhook.orderByReference ? 'per-reference' : 'none') : '-',
      v.webhook?.previousSecretExpiresAt ?? '-',
      v.webhook?.maxPerSecond ? String(v.webhook.maxPerSecond) : '-',
      v.webhook?.url ?? '-',
    ]),
  );
}

/** Webhooks that are off: why (failing: auto-disable; manual), since when, and since when they failed. */
function disabledTable(views: MerchantView[]): string {
  return formatTable(
    ['MERCHANT', 'REASON', 'DISABLED AT', 'FAILING SINCE', 'URL'],
    views.map((v) => [v.id, v.webhook?.disabledReason ?? 'manual', v.webhook?.disabledAt ?? '-', v.webhook?.failingSince ?? '-', v.webhook?.url ?? '-']),
  );
}


export function declareMerchants(program: Command, io: CliIo): void {
  const merchants = program
    .command('merchants')
    .usage('<list|get|set|rotate-secret|audit|reseal|delete> [options]')
    .description('Merchant webhook settings in PostgreSQL (DATABASE_URL, SECRETS_KEY), as the admin API.')
    .addHelpText('after', '\nSettings live in the merchants table of DATABASE_URL; every program sees a change within a second.');

  merchants
    .command('list')
    .summary("shows every merchant's webhook settings (never a secret)")
    .description("Shows each merchant's settings from PostgreSQL. Secrets are never shown.")
    .option('--json', 'one JSON array on stdout, for scripts', false)
    .option('--disabled', 'only webhooks that are off: why (failing: disabled automatically after ENDPOINT_DISABLE_AFTER; manual) and since when', false)
    .addHelpText('after', `\n${EXIT}`)
    .action(
      action(io, (raw: { json: boolean; disabled: boolean }) => raw, async (options, ctx) => {
        const all = await withSettings(ctx, urlPolicy(ctx), async (settings) => settings.list());
        const views = options.disabled ? all.filter((v) => v.webhook && !v.webhook.enabled) : all;
        if (options.json) writeLine(ctx.stdout, JSON.stringify(views));
        if (views.length === 0) throw new NothingMatchedError(options.disabled ? 'no disabled webhook' : 'no merchant in the database');
        if (!options.json) writeLine(ctx.stdout, options.disabled ? disabledTable(views) : table(views));
        return 0;
      }),
    );

  merchants
    .command('get')
    .summary("shows one merchant's")
    .description("Shows one merchant's settings (never the secret).")
    .argument('<merchant-id>')
    .option('--json', 'one JSON object on stdout, for scripts', false)
    .addHelpText('after', `\n${EXIT} (3: no such merchant)`)
    .action(
      action(io, (raw: { json: boolean }, args) => ({ id: merchantId(args), json: raw.json }), async (options, ctx) => {
        const view = await withSettings(ctx, urlPolicy(ctx), async (settings) => settings.get(options.id));
        if (!view) throw new NothingMatchedError(`no merchant ${options.id}`);
        writeLine(ctx.stdout, options.json ? JSON.stringify(view) : table([view]));
        return 0;
      }),
    );

  merchants
    .command('set')
    .summary('creates or changes a merchant; a new webhook\'s secret is printed once')
    .description(
      'Creates a merchant (--public-key and --url needed) or changes one; options left out keep their value, ' +
        'and only what changes is checked. A webhook set up for the first time gets a new whsec_ secret, printed ' +
        'once on stdout. URLs must be https (http in development mode: WEBHOOKS_DEV=true), ' +
        'without credentials, and not a private address literal unless ALLOW_PRIVATE_TARGETS=true (the default in ' +
        'development mode).',
    )
    .argument('<merchant-id>')
    .option('--public-key <key>', 'the key the merchant sends as x-auth-token (8 to 512 characters, unique)')
    .option('--url <url>', 'where webhooks are POSTed')
    .addOption(new Option('--enable', 'send webhooks (the default for a new webhook)').conflicts('disable'))
    .addOption(new Option('--disable', 'stop sending webhooks; the settings and the secret are kept'))
    .addOption(new Option('--events <list>', `send only these events, comma-separated: ${EVENT_NAMES.join(', ')}`).conflicts('allEvents'))
    .addOption(new Option('--all-events', 'send every event (the default for a new webhook)'))
    .addOption(new Option('--max-per-second <n>', `throttle: at most n webhooks a second to the endpoint, 1 to ${MAX_PER_SECOND_LIMIT}, across every dispatcher`).conflicts('unthrottled'))
    .addOption(new Option('--unthrottled', 'no throttle (the default for a new webhook)'))
    .addOption(new Option('--order-by-reference', 'order per reference: a webhook waits while an earlier one of its tnxRef (a payout: reference) is not yet delivered, failed or skipped'))
    .addOption(new Option('--no-order-by-reference', 'no order promised (the default)'))
    .addOption(new Option('--no-webhook', 'remove the webhook: nothing is sent to this merchant').conflicts(['url', 'enable', 'disable', 'events', 'allEvents', 'maxPerSecond', 'unthrottled', 'orderByReference']))
    .addHelpText('after', `\n${EXIT}`)
    .action(action(io, checkSet, runSet));

  merchants
    .command('rotate-secret')
    .summary('a new secret; both sign webhooks until the grace period ends')
    .description(
      'Prints a new webhook secret. Until the grace period has passed, webhooks carry a signature with the new ' +
        'and with the previous secret, so the merchant can switch at any time.',
    )
    .argument('<merchant-id>')
    .option('--grace <duration>', 'how long the previous secret keeps signing: up to 30d, or 0 for none (a leaked secret)', '24h')
    .addHelpText('after', `\n${EXIT} (3: no such merchant)`)
    .action(
      action(
        io,
        (raw: { grace: string }, args) => ({ id: merchantId(args), graceSeconds: graceSecondsOf(raw.grace) }),
        async (options, ctx) => {
          const rotated = await withSettings(ctx, urlPolicy(ctx), (settings) => settings.rotate(options.id, options.graceSeconds, { actor: CLI_ACTOR })).catch((err: unknown) => {
            if (err instanceof MerchantNotFoundError) throw new NothingMatchedError(`no merchant ${options.id}`);
            throw err;
          });
          writeLine(ctx.stdout, `webhook secret: ${rotated.secret}`);
          writeLine(
            ctx.stderr,
            rotated.previousSecretExpiresAt
              ? `Webhooks are signed with the new and the previous secret until ${rotated.previousSecretExpiresAt}; give the merchant the new one now.`
              : 'The previous secret stopped signing at once; give the merchant the new one now.',
          );
          return 0;
        },
      ),
    );

  merchants
    .command('audit')
    .summary("shows who changed a merchant's settings, what and when")
    .description(
      "The merchant's audit trail, newest first: every settings write (admin API, portal, CLI, auto-disable), secret " +
        'rotation, portal link minted and revocation of portal sessions, with who made it (admin:<token sub>, ' +
        'portal:<session>, cli, service), what changed by field (a secret only as rotated) and from which address.',
    )
    .argument('<merchant-id>')
    .option('--limit <n>', 'entries at most', '50')
    .option('--json', 'one JSON array on stdout, for scripts', false)
    .addHelpText('after', `\n${EXIT} (3: nothing recorded for this merchant)`)
    .action(
      action(
        io,
        (raw: { limit: string; json: boolean }, args) => {
          const limit = Number(raw.limit);
          if (!Number.isInteger(limit) || limit < 1 || limit > 500) throw new UsageError('--limit takes a whole number from 1 to 500');
          return { id: merchantId(args), limit, json: raw.json };
        },
        async (options, ctx) => {
          const entries = await withSealedStore(ctx, (database) => listAudit(database, options.id, options.limit));
          if (options.json) writeLine(ctx.stdout, JSON.stringify(entries));
          if (entries.length === 0) throw new NothingMatchedError(`nothing recorded for merchant ${options.id}`);
          if (!options.json) {
            const shown = (changes: Record<string, unknown>) =>
              Object.entries(changes).map(([field, change]) => (typeof change === 'object' && change && 'to' in change ? `${field}=${JSON.stringify((change as { to: unknown }).to)}` : `${field}:${JSON.stringify(change)}`)).join(' ');
            writeLine(ctx.stdout, formatTable(['AT', 'ACTOR', 'ACTION', 'ADDRESS', 'CHANGES'], entries.map((e) => [e.at, e.actor, e.action, e.address ?? '-', shown(e.changes)])));
          }
          return 0;
        },
      ),
    );

  merchants
    .command('reseal')
    .summary('seals every stored secret with SECRETS_KEY, after rotating it')
    .description(
      'The last step of a rotation of SECRETS_KEY: with the new key in SECRETS_KEY and the old one in ' +
        'SECRETS_KEY_PREVIOUS (and every program restarted with both), seals again with the new key every stored ' +
        'secret the old one sealed. Settings are not changed. Afterwards SECRETS_KEY_PREVIOUS can be removed.',
    )
    .addHelpText('after', `\n${EXIT}`)
    .action(
      action(io, () => ({}), async (_options, ctx) => {
        const count = await withSealedStore(ctx, (database, box) => resealSecrets(database, box));
        writeLine(ctx.stderr, `${count} stored secret(s) sealed again with SECRETS_KEY; no secret is sealed with another key now`);
        return 0;
      }),
    );

  declareDelete(merchants, io);
  declareEndpoints(merchants, io);
}

/** Deletes one merchant's rows from every table, in one transaction; only DATABASE_URL is needed. */
function declareDelete(merchants: Command, io: CliIo): void {
  merchants
    .command('delete')
    .summary("deletes a merchant and every row of its data from PostgreSQL, in one transaction")
    .description(
      "Deletes the merchant and its data from every table of DATABASE_URL in one transaction: settings and sealed " +
        'secrets, Idempotency-Key answers, rate-limit counters, portal links and sessions, the delivery log (webhooks, ' +
        'payloads, attempts, quarantined records), failed webhooks and waiting retries; the audit trail is kept and ' +
        'records the delete. Prints the rows deleted per table. RabbitMQ is not touched: messages of this merchant still queued or in the streams stay ' +
        'until they are delivered, parked or age out, and the recorder stores records still in the deliveries stream ' +
        'again (run it again once they are gone). Running programs forget the merchant within a second (the delete ' +
        'notifies them), or at their next poll (10 s) when the notification is lost: a tombstone of the merchant ' +
        '(a digest of its id, kept a day) tells them. --yes is required.',
    )
    .argument('<merchant-id>')
    .option('--yes', 'really delete: nothing can bring the data back but a backup', false)
    .addHelpText('after', `\n${EXIT} (3: no row of this merchant in any table)`)
    .action(
      action(
        io,
        (raw: { yes: boolean }, args) => {
          const id = merchantId(args);
          if (!raw.yes) throw new UsageError(`give --yes to delete merchant ${id} and all its data`);
          return { id };
        },
        async (options, ctx) => {
          if (!ctx.config.DATABASE_URL) throw new UsageError('merchants delete needs DATABASE_URL: merchants and their data live in PostgreSQL');
          const deleted = await withDatabase(ctx.config.DATABASE_URL, (database) => deleteMerchantData(database, options.id, CLI_ACTOR));
          const total = Object.values(deleted).reduce((sum, n) => sum + n, 0);
          writeLine(ctx.stdout, formatTable(['TABLE', 'ROWS DELETED'], Object.entries(deleted).map(([table, n]) => [table, String(n)])));
          if (total === 0) throw new NothingMatchedError(`no row of merchant ${options.id} in any table`);
          writeLine(ctx.stderr, `merchant ${options.id}: ${total} row(s) deleted; running programs forget it within 10 s (each logs "merchant deleted; no longer served")`);
          return 0;
        },
      ),
    );
}

export interface MerchantsSetOptions {
  id: string;
  publicKey?: string;
  url?: string;
  enabled?: boolean;
  events?: string[];
  allEvents: boolean;
  /** Order per reference on or off; undefined keeps the merchant's. */
  orderByReference?: boolean;
  /** The throttle: a number sets it, null removes it, undefined keeps it. */
  maxPerSecond?: number | null;
  noWebhook: boolean;
}

interface SetRaw {
  publicKey?: string;
  url?: string;
  enable?: boolean;
  disable?: boolean;
  events?: string;
  allEvents?: boolean;
  orderByReference?: boolean;
  maxPerSecond?: string;
  unthrottled?: boolean;
  webhook: boolean;
}

function checkSet(raw: SetRaw, args: string[]): MerchantsSetOptions {
  const events = raw.events?.split(',').map((e) => e.trim()).filter((e) => e !== '');
  for (const event of events ?? []) {
    if (!(EVENT_NAMES as readonly string[]).includes(event)) throw new UsageError(`--events takes ${EVENT_NAMES.join(', ')}; not ${event}`);
  }
  if (events !== undefined && events.length === 0) throw new UsageError(`--events takes at least one of ${EVENT_NAMES.join(', ')}`);
  const maxPerSecond = raw.maxPerSecond === undefined ? undefined : Number(raw.maxPerSecond);
  if (maxPerSecond !== undefined && !(Number.isInteger(maxPerSecond) && maxPerSecond >= 1 && maxPerSecond <= MAX_PER_SECOND_LIMIT && /^\d+$/.test(raw.maxPerSecond!.trim()))) {
    throw new UsageError(`--max-per-second takes a whole number from 1 to ${MAX_PER_SECOND_LIMIT}; not ${raw.maxPerSecond}`);
  }
  return {
    id: merchantId(args),
    publicKey: raw.publicKey,
    url: raw.url,
    enabled: raw.enable ? true : raw.disable ? false : undefined,
    events,
    allEvents: raw.allEvents === true,
    orderByReference: raw.orderByReference,
    maxPerSecond: raw.unthrottled ? null : maxPerSecond,
    noWebhook: raw.webhook === false,
  };
}

/** Options left out keep the merchant's current value: an operator changes one thing at a time. */
async function runSet(options: MerchantsSetOptions, ctx: CliContext): Promise<number> {
  const policy = options.url === undefined ? KEEP_STORED_URL : urlPolicy(ctx);
  const result = await withSettings(ctx, policy, async (settings) => {
    const current = settings.get(options.id);
    const publicKey = options.publicKey ?? current?.publicKey;
    if (publicKey === undefined) throw new UsageError(`merchant ${options.id} is new: give --public-key`);
    const input: Record<string, unknown> = { publicKey };
    if (!options.noWebhook) {
      const url = options.url ?? current?.webhook?.url;
      if (url === undefined && (options.enabled !== undefined || options.events || options.maxPerSecond || options.orderByReference !== undefined)) {
        throw new UsageError(`merchant ${options.id} has no webhook yet: give --url`);
      }
      if (url !== undefined) {
        const kept = current?.webhook && current.webhook.events.length < EVENT_NAMES.length ? current.webhook.events : undefined;
        const events = options.allEvents ? undefined : (options.events ?? kept);
        const ordered = options.orderByReference ?? current?.webhook?.orderByReference ?? false;
        const maxPerSecond = options.maxPerSecond === undefined ? current?.webhook?.maxPerSecond : options.maxPerSecond;
        input.webhook = { url, enabled: options.enabled ?? current?.webhook?.enabled ?? true, ...(events ? { events } : {}), ...(maxPerSecond ? { maxPerSecond } : {}), ...(ordered ? { orderByReference: true } : {}) };
      }
    }
    const parsed = merchantInputSchema.safeParse(input);
    if (!parsed.success) throw firstIssue(parsed.error);
    return settings.put(options.id, parsed.data as MerchantInput, { actor: CLI_ACTOR, enabledCarriedOver: options.enabled === undefined });
  }).catch((err: unknown) => {
    if (err instanceof InvalidSettingsError) throw new UsageError(err.message);
    throw err;
  });
  writeLine(ctx.stdout, table([result.view]));
  if (result.secret) {
    writeLine(ctx.stdout, `webhook secret: ${result.secret}`);
    writeLine(ctx.stderr, 'Give this secret to the merchant now: it is not shown again.');
  }
  writeLine(ctx.stderr, `merchant ${options.id} ${result.created ? 'created' : 'updated'}`);
  return 0;
}
