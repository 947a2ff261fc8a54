import { parseArgs } from 'node:util';
import type { BrokerConnection } from '../../libs/broker/index.js';
import { parseDuration } from '../../libs/config/index.js';
import { EVENT_NAMES } from '../../libs/contracts/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import {
  BrokerMerchantDirectory,
  InvalidSettingsError,
  type MerchantInput,
  MerchantNotFoundError,
  MerchantSettings,
  type MerchantView,
  firstIssue,
  merchantInputSchema,
} from '../../libs/merchants/index.js';
import { topologyNames } from '../../libs/topology/index.js';
import { withBroker } from './broker.js';
import type { Command } from './command.js';
import type { CliContext } from './context.js';
import { writeLine } from './context.js';
import { NothingMatchedError, UsageError } from './errors.js';
import { parseWithUsage } from './options.js';
import { formatTable } from './table.js';
import { MERCHANTS_GET_USAGE, MERCHANTS_LIST_USAGE, MERCHANTS_ROTATE_USAGE, MERCHANTS_SET_USAGE } from './usage.js';

/**
 * Operators' side of the admin API: the same MerchantSettings over the merchants stream, so a
 * change made here follows the same rules and reaches every program the same way.
 */
async function withSettings<T>(ctx: CliContext, run: (settings: MerchantSettings) => Promise<T>): Promise<T> {
  const stream = topologyNames(ctx.config.TOPOLOGY_PREFIX).merchants;
  return withBroker(ctx.config, [stream], async (broker: BrokerConnection) => {
    const directory = new BrokerMerchantDirectory(broker, stream, silentLogger());
    try {
      await directory.start();
      await directory.waitUntilReady(120_000);
      const policy = { allowHttp: ctx.config.WEBHOOKS_DEV, allowPrivateTargets: ctx.config.ALLOW_PRIVATE_TARGETS };
      return await run(new MerchantSettings(directory, policy));
    } finally {
      await directory.close();
    }
  });
}

function table(views: MerchantView[]): string {
  return formatTable(
    ['MERCHANT', 'PUBLIC KEY', 'ENABLED', 'EVENTS', 'PREVIOUS SECRET UNTIL', 'URL'],
    views.map((v) => [
      v.id,
      v.publicKey,
      v.webhook ? String(v.webhook.enabled) : 'no webhook',
      v.webhook ? v.webhook.events.join(',') : '-',
      v.webhook?.previousSecretExpiresAt ?? '-',
      v.webhook?.url ?? '-',
    ]),
  );
}

function merchantIdFrom(positionals: string[], usage: string): string {
  const [id, extra] = positionals;
  if (id === undefined || id.trim() === '') throw new UsageError('give the merchant id', usage);
  if (extra !== undefined) throw new UsageError(`unexpected argument ${extra}`, usage);
  return id;
}

export const merchantsList: Command<{ json: boolean }> = {
  usage: MERCHANTS_LIST_USAGE,
  parse(args) {
    const { values, positionals } = parseWithUsage(MERCHANTS_LIST_USAGE, () =>
      parseArgs({ args, allowPositionals: true, options: { json: { type: 'boolean', default: false }, help: { type: 'boolean', short: 'h' } } }),
    );
    if (values.help) return 'help';
    if (positionals.length > 0) throw new UsageError(`unexpected argument ${positionals[0]}`, MERCHANTS_LIST_USAGE);
    return { json: values.json };
  },
  async run(options, ctx) {
    const views = await withSettings(ctx, async (settings) => settings.list());
    if (options.json) writeLine(ctx.stdout, JSON.stringify(views));
    if (views.length === 0) throw new NothingMatchedError('no merchant in the merchants stream');
    if (!options.json) writeLine(ctx.stdout, table(views));
    return 0;
  },
};

export const merchantsGet: Command<{ id: string; json: boolean }> = {
  usage: MERCHANTS_GET_USAGE,
  parse(args) {
    const { values, positionals } = parseWithUsage(MERCHANTS_GET_USAGE, () =>
      parseArgs({ args, allowPositionals: true, options: { json: { type: 'boolean', default: false }, help: { type: 'boolean', short: 'h' } } }),
    );
    if (values.help) return 'help';
    return { id: merchantIdFrom(positionals, MERCHANTS_GET_USAGE), json: values.json };
  },
  async run(options, ctx) {
    const view = await withSettings(ctx, async (settings) => settings.get(options.id));
    if (!view) throw new NothingMatchedError(`no merchant ${options.id}`);
    writeLine(ctx.stdout, options.json ? JSON.stringify(view) : table([view]));
    return 0;
  },
};

export interface MerchantsSetOptions {
  id: string;
  publicKey?: string;
  url?: string;
  enabled?: boolean;
  events?: string[];
  allEvents: boolean;
  noWebhook: boolean;
}

/** Options left out keep the merchant's current value: an operator changes one thing at a time. */
export const merchantsSet: Command<MerchantsSetOptions> = {
  usage: MERCHANTS_SET_USAGE,
  parse(args) {
    const { values, positionals } = parseWithUsage(MERCHANTS_SET_USAGE, () =>
      parseArgs({
        args,
        allowPositionals: true,
        options: {
          'public-key': { type: 'string' },
          url: { type: 'string' },
          enable: { type: 'boolean' },
          disable: { type: 'boolean' },
          events: { type: 'string' },
          'all-events': { type: 'boolean', default: false },
          'no-webhook': { type: 'boolean', default: false },
          help: { type: 'boolean', short: 'h' },
        },
      }),
    );
    if (values.help) return 'help';
    const id = merchantIdFrom(positionals, MERCHANTS_SET_USAGE);
    if (values.enable && values.disable) throw new UsageError('give --enable or --disable, not both', MERCHANTS_SET_USAGE);
    if (values.events !== undefined && values['all-events']) throw new UsageError('give --events or --all-events, not both', MERCHANTS_SET_USAGE);
    const webhookOption = values.url !== undefined || values.enable || values.disable || values.events !== undefined || values['all-events'];
    if (values['no-webhook'] && webhookOption) throw new UsageError('--no-webhook removes the webhook: give no webhook option with it', MERCHANTS_SET_USAGE);
    const events = values.events?.split(',').map((e) => e.trim()).filter((e) => e !== '');
    for (const event of events ?? []) {
      if (!(EVENT_NAMES as readonly string[]).includes(event)) throw new UsageError(`--events takes ${EVENT_NAMES.join(', ')}; not ${event}`, MERCHANTS_SET_USAGE);
    }
    return {
      id,
      publicKey: values['public-key'],
      url: values.url,
      enabled: values.enable ? true : values.disable ? false : undefined,
      events,
      allEvents: values['all-events'],
      noWebhook: values['no-webhook'],
    };
  },
  async run(options, ctx) {
    const result = await withSettings(ctx, async (settings) => {
      const current = settings.get(options.id);
      const publicKey = options.publicKey ?? current?.publicKey;
      if (publicKey === undefined) throw new UsageError(`merchant ${options.id} is new: give --public-key`, MERCHANTS_SET_USAGE);
      const input: Record<string, unknown> = { publicKey };
      if (!options.noWebhook) {
        const url = options.url ?? current?.webhook?.url;
        if (url === undefined && (options.enabled !== undefined || options.events)) {
          throw new UsageError(`merchant ${options.id} has no webhook yet: give --url`, MERCHANTS_SET_USAGE);
        }
        if (url !== undefined) {
          const events = options.allEvents ? undefined : options.events ?? (current?.webhook && current.webhook.events.length < EVENT_NAMES.length ? current.webhook.events : undefined);
          input.webhook = { url, enabled: options.enabled ?? current?.webhook?.enabled ?? true, ...(events ? { events } : {}) };
        }
      }
      const parsed = merchantInputSchema.safeParse(input);
      if (!parsed.success) throw firstIssue(parsed.error);
      return settings.put(options.id, parsed.data as MerchantInput);
    }).catch((err: unknown) => {
      if (err instanceof InvalidSettingsError) throw new UsageError(err.message, MERCHANTS_SET_USAGE);
      throw err;
    });
    writeLine(ctx.stdout, table([result.view]));
    if (result.secret) {
      writeLine(ctx.stdout, `webhook secret: ${result.secret}`);
      writeLine(ctx.stderr, 'Give this secret to the merchant now: it is not shown again.');
    }
    writeLine(ctx.stderr, `merchant ${options.id} ${result.created ? 'created' : 'updated'}`);
    return 0;
  },
};

export const merchantsRotateSecret: Command<{ id: string; graceSeconds: number }> = {
  usage: MERCHANTS_ROTATE_USAGE,
  parse(args) {
    const { values, positionals } = parseWithUsage(MERCHANTS_ROTATE_USAGE, () =>
      parseArgs({ args, allowPositionals: true, options: { grace: { type: 'string', default: '24h' }, help: { type: 'boolean', short: 'h' } } }),
    );
    if (values.help) return 'help';
    const id = merchantIdFrom(positionals, MERCHANTS_ROTATE_USAGE);
    const graceMs = values.grace.trim() === '0' ? 0 : parseDuration(values.grace);
    if (graceMs === undefined || graceMs > 30 * 86_400_000) throw new UsageError('--grace takes a duration up to 30d (e.g. 24h), or 0', MERCHANTS_ROTATE_USAGE);
    return { id, graceSeconds: Math.round(graceMs / 1000) };
  },
  async run(options, ctx) {
    const rotated = await withSettings(ctx, (settings) => settings.rotate(options.id, options.graceSeconds)).catch((err: unknown) => {
      if (err instanceof MerchantNotFoundError) throw new NothingMatchedError(`no merchant ${options.id}`);
      throw err;
    });
    writeLine(ctx.stdout, `webhook secret: ${rotated.secret}`);
    writeLine(ctx.stderr, rotated.previousSecretExpiresAt
      ? `Webhooks are signed with the new and the previous secret until ${rotated.previousSecretExpiresAt}; give the merchant the new one now.`
      : 'The previous secret stopped signing at once; give the merchant the new one now.');
    return 0;
  },
};
