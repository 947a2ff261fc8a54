import { Option } from 'commander';
import { parseDuration } from '../../libs/config/index.js';
import { EVENT_NAMES } from '../../libs/contracts/index.js';
import { EndpointSettings, type EndpointView, endpointInputSchema, endpointPatchSchema, firstIssue, MAX_PER_SECOND_LIMIT, withEndpointRates } from '../../libs/merchants/index.js';
import { CliCommand, EXIT, formatTable, UsageError, wholeNumber, writeLine } from './command.js';
import { CLI_ACTOR, merchantId, withSettings } from './merchant-store.js';

export function endpointTable(views: EndpointView[]): string {
  return formatTable(
    ['ENDPOINT', 'ENABLED', 'REASON', 'EVENTS', 'ORDER', 'MAX/S', 'PREVIOUS SECRET UNTIL', 'URL', 'DESCRIPTION'],
    views.map((v) => [
      v.id,
      String(v.enabled),
      v.disabledReason ?? '-',
      v.events.join(','),
      v.orderByReference ? 'per-reference' : 'none',
      v.maxPerSecond === null ? '-' : String(v.maxPerSecond),
      v.previousSecretExpiresAt ?? '-',
      v.url,
      v.description ?? '-',
    ]),
  );
}

function maxPerSecondOf(raw: string): number {
  return wholeNumber(raw, MAX_PER_SECOND_LIMIT, `--max-per-second takes a whole number from 1 to ${MAX_PER_SECOND_LIMIT}; not ${raw}`);
}

function endpointId(args: string[]): string {
  const id = args[1];
  if (id === undefined || id.trim() === '') throw new UsageError('give the endpoint id (ep_…)');
  return id;
}

function eventsOf(raw: string): string[] {
  const events = raw.split(',').map((e) => e.trim()).filter((e) => e !== '');
  const unknown = events.find((event) => !(EVENT_NAMES as readonly string[]).includes(event));
  if (unknown !== undefined) throw new UsageError(`--events takes ${EVENT_NAMES.join(', ')}; not ${unknown}`);
  if (events.length === 0) throw new UsageError(`--events takes at least one of ${EVENT_NAMES.join(', ')}`);
  return events;
}

/** --grace of a rotation: a duration up to 30 days, or 0 (a leaked secret stops at once), in seconds. */
function graceSecondsOf(grace: string): number {
  const graceMs = grace.trim() === '0' ? 0 : parseDuration(grace);
  if (graceMs === undefined || graceMs > 30 * 86_400_000) throw new UsageError('--grace takes a duration up to 30d (e.g. 24h), or 0');
  return Math.round(graceMs / 1000);
}

export function declareEndpoints(merchants: CliCommand): void {
  const endpoints = merchants
    .command('endpoints')
    .summary("lists, adds, changes, deletes a merchant's endpoints and rotates one's secret")
    .description("A merchant's endpoints, each with its own URL, events, secret and enabled state (the admin API's /admin/merchants/{id}/endpoints).");

  endpoints
    .command('list')
    .summary("lists a merchant's endpoints")
    .argument('<merchant-id>')
    .option('--json', 'one JSON array on stdout, for scripts', false)
    .addHelpText('after', `\n${EXIT} (3: no such merchant)`)
    .handle((raw: { json: boolean }, args) => ({ id: merchantId(args), json: raw.json }), async (options, ctx) => {
      // Each at the rate it is sent at now, as the admin API shows it.
      const views = await withSettings(ctx, 'read', async (settings, database) => withEndpointRates(database, options.id, new EndpointSettings(settings).list(options.id)));
      writeLine(ctx.stdout, options.json ? JSON.stringify(views) : endpointTable(views));
    });

  endpoints
    .command('add')
    .summary('adds an endpoint and prints its secret (shown once)')
    .argument('<merchant-id>')
    .requiredOption('--url <url>', 'where its webhooks are POSTed')
    .option('--events <list>', `comma-separated: ${EVENT_NAMES.join(', ')} (default: all)`)
    .option('--description <text>', 'what the merchant calls it')
    .option('--disabled', 'add it turned off', false)
    .option('--max-per-second <n>', `throttle: at most n webhooks a second to it, 1 to ${MAX_PER_SECOND_LIMIT}, across every dispatcher (default: no limit)`)
    .option('--order-by-reference', 'order per reference: a webhook waits while an earlier one of its tnxRef (a payout: reference) is not yet delivered, failed or skipped', false)
    .addHelpText('after', `\nA merchant has at most MAX_ENDPOINTS_PER_MERCHANT endpoints (20 by default), each URL once.\n${EXIT} (2 also: the limit reached, or the URL already used; 3: no such merchant)`)
    .handle(
      (raw: { url: string; events?: string; description?: string; disabled: boolean; maxPerSecond?: string; orderByReference: boolean }, args) => ({
        id: merchantId(args),
        input: {
          url: raw.url,
          enabled: !raw.disabled,
          ...(raw.events === undefined ? {} : { events: eventsOf(raw.events) }),
          ...(raw.description ? { description: raw.description } : {}),
          ...(raw.maxPerSecond === undefined ? {} : { maxPerSecond: maxPerSecondOf(raw.maxPerSecond) }),
          ...(raw.orderByReference ? { orderByReference: true } : {}),
        },
      }),
      async (options, ctx) => {
        const parsed = endpointInputSchema.safeParse(options.input);
        if (!parsed.success) throw new UsageError(firstIssue(parsed.error).message);
        const created = await withSettings(ctx, 'write', (settings) => new EndpointSettings(settings).create(options.id, parsed.data, { actor: CLI_ACTOR }));
        writeLine(ctx.stdout, endpointTable([created.view]));
        writeLine(ctx.stdout, `webhook secret: ${created.secret}`);
        writeLine(ctx.stderr, `endpoint ${created.view.id} of merchant ${options.id} added; give this secret to the merchant now: it is not shown again.`);
      },
    );

  endpoints
    .command('set')
    .summary('changes what the options name of one endpoint')
    .argument('<merchant-id>')
    .argument('<endpoint-id>')
    .option('--url <url>', 'where its webhooks are POSTed')
    .option('--events <list>', `comma-separated: ${EVENT_NAMES.join(', ')}`)
    .option('--all-events', 'every event again', false)
    .option('--description <text>', 'what the merchant calls it')
    .option('--enable', 'turn it on')
    .option('--disable', 'turn it off (manual: only an operator turns it on again)')
    .addOption(new Option('--max-per-second <n>', `throttle: at most n webhooks a second to it, 1 to ${MAX_PER_SECOND_LIMIT}`).conflicts('unthrottled'))
    .option('--unthrottled', 'no throttle')
    .option('--order-by-reference', 'order per reference')
    .option('--no-order-by-reference', 'no order promised')
    .addHelpText('after', `\n${EXIT} (2 also: the URL already used by another endpoint of the merchant; 3: no such merchant or endpoint)`)
    .handle(
      (raw: { url?: string; events?: string; allEvents: boolean; description?: string; enable?: boolean; disable?: boolean; maxPerSecond?: string; unthrottled?: boolean; orderByReference?: boolean }, args) => {
        if (raw.enable && raw.disable) throw new UsageError('give --enable or --disable, not both');
        const patch = {
          ...(raw.url === undefined ? {} : { url: raw.url }),
          ...(raw.allEvents ? { events: null } : raw.events === undefined ? {} : { events: eventsOf(raw.events) }),
          ...(raw.description === undefined ? {} : { description: raw.description }),
          ...(raw.enable ? { enabled: true } : raw.disable ? { enabled: false } : {}),
          ...(raw.unthrottled ? { maxPerSecond: null } : raw.maxPerSecond === undefined ? {} : { maxPerSecond: maxPerSecondOf(raw.maxPerSecond) }),
          ...(raw.orderByReference === undefined ? {} : { orderByReference: raw.orderByReference }),
        };
        if (Object.keys(patch).length === 0) {
          throw new UsageError('give what to change: --url, --events, --all-events, --description, --enable, --disable, --max-per-second, --unthrottled or --(no-)order-by-reference');
        }
        return { id: merchantId(args), endpoint: endpointId(args), patch };
      },
      async (options, ctx) => {
        const parsed = endpointPatchSchema.safeParse(options.patch);
        if (!parsed.success) throw new UsageError(firstIssue(parsed.error).message);
        const written = await withSettings(ctx, 'write', (settings) => new EndpointSettings(settings).patch(options.id, options.endpoint, parsed.data, { actor: CLI_ACTOR }));
        writeLine(ctx.stdout, endpointTable([written.view]));
      },
    );

  endpoints
    .command('delete')
    .summary('removes one endpoint: nothing more is sent to it')
    .argument('<merchant-id>')
    .argument('<endpoint-id>')
    .addHelpText('after', `\n${EXIT} (3: no such merchant or endpoint)`)
    .handle((_raw: object, args) => ({ id: merchantId(args), endpoint: endpointId(args) }), async (options, ctx) => {
      await withSettings(ctx, 'write', (settings) => new EndpointSettings(settings).delete(options.id, options.endpoint, { actor: CLI_ACTOR }));
      writeLine(ctx.stderr, `endpoint ${options.endpoint} of merchant ${options.id} deleted`);
    });

  endpoints
    .command('rotate-secret')
    .summary("a new secret for one endpoint; the merchant's other endpoints keep theirs")
    .argument('<merchant-id>')
    .argument('<endpoint-id>')
    .option('--grace <duration>', 'how long the previous secret keeps signing: up to 30d, or 0 for none (a leaked secret)', '24h')
    .addHelpText('after', `\n${EXIT} (3: no such merchant or endpoint)`)
    .handle(
      (raw: { grace: string }, args) => ({ id: merchantId(args), endpoint: endpointId(args), graceSeconds: graceSecondsOf(raw.grace) }),
      async (options, ctx) => {
        const rotated = await withSettings(ctx, 'write', (settings) => new EndpointSettings(settings).rotate(options.id, options.endpoint, options.graceSeconds, { actor: CLI_ACTOR }));
        writeLine(ctx.stdout, `webhook secret: ${rotated.secret}`);
        writeLine(ctx.stderr, rotated.previousSecretExpiresAt ? `The previous secret keeps signing until ${rotated.previousSecretExpiresAt}.` : 'The previous secret stopped signing at once.');
      },
    );
}
