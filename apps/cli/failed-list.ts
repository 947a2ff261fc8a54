import type { Command } from 'commander';
import { withFailures } from './broker.js';
import { action } from './command.js';
import { type CliContext, type CliIo, writeLine } from './context.js';
import { NothingMatchedError, UsageError } from './errors.js';
import { failureJson, failuresTable } from './failure-output.js';
import { EXIT, TIME } from './help-text.js';
import { checkEndpointId, checkReference, parseLimit, parseTime, requireMerchant } from './options.js';

interface Raw {
  merchant?: string;
  reference?: string;
  endpoint?: string;
  since?: string;
  until?: string;
  all: boolean;
  limit: string;
  json: boolean;
}

/** Which failures `failed list` shows: a merchant's, a reference's (any merchant's), a time window. */
export interface FailureFilter {
  merchantId?: string;
  reference?: string;
  endpointId?: string;
  since?: Date;
  until?: Date;
}

export interface FailedListOptions {
  filter: FailureFilter;
  all: boolean;
  limit: number;
  json: boolean;
}

export function declareFailedList(failed: Command, io: CliIo): void {
  failed
    .command('list')
    .summary('shows failed webhooks, why they failed and their last error')
    .description(
      'Reads the failure index in PostgreSQL (DATABASE_URL) and shows the failed webhooks not resent since, oldest first: ' +
        'failed-at, merchant, endpoint (a webhook fails once per endpoint: one row each; - before endpoints), event, reference(s), webhook-id, attempts, last status, why it failed ' +
        '(attempts-exhausted, circuit-open, blocked, webhook-disabled, endpoint-disabled, merchant-removed, event-not-subscribed) ' +
        'and the last error.',
    )
    .option('--merchant <id>', "only this merchant's")
    .option('--reference <ref>', 'only this reference (a refund is found by its refundRef or its tnxRef)')
    .option('--endpoint <id>', "only failures on this endpoint (ep_…)")
    .option('--since <time>', 'only failures at or after this time')
    .option('--until <time>', 'only failures before this time')
    .option('--all', 'resolved (already resent) failures too, with a RESOLVED column', false)
    .option('--limit <n>', 'the N most recent; a note on stderr says when some were left out', '500')
    .option('--json', 'one JSON array on stdout, for scripts', false)
    .addHelpText('after', `\n${TIME}\nEnvironment: DATABASE_URL (the failure index's PostgreSQL).\n${EXIT}`)
    .action(action(io, check, run));
}

function check(raw: Raw, _args: string[], now: Date): FailedListOptions {
  const filter: FailureFilter = {
    merchantId: raw.merchant === undefined ? undefined : requireMerchant(raw.merchant, 'failed list'),
    reference: raw.reference === undefined ? undefined : checkReference(raw.reference),
    endpointId: raw.endpoint === undefined ? undefined : checkEndpointId(raw.endpoint),
    since: raw.since === undefined ? undefined : parseTime('since', raw.since, now),
    until: raw.until === undefined ? undefined : parseTime('until', raw.until, now),
  };
  if (filter.since && filter.until && filter.since >= filter.until) throw new UsageError('--since must be before --until');
  return { filter, all: raw.all, limit: parseLimit(raw.limit), json: raw.json };
}

async function run(options: FailedListOptions, ctx: CliContext): Promise<number> {
  const { filter } = options;
  // One more than asked: whether some were left out.
  const rows = await withFailures(ctx.config, (store) =>
    store.list({ merchantId: filter.merchantId, reference: filter.reference, endpointId: filter.endpointId, since: filter.since, until: filter.until, unresolvedOnly: !options.all, limit: options.limit + 1 }),
  );
  const shown = rows.slice(0, options.limit).reverse();
  // Scripts get a JSON array even when it is empty; the exit code says whether anything matched.
  if (options.json) writeLine(ctx.stdout, JSON.stringify(shown.map(failureJson)));
  if (shown.length === 0) throw new NothingMatchedError(options.all ? 'no failed webhook matches' : 'no unresolved failed webhook matches');
  if (!options.json) writeLine(ctx.stdout, failuresTable(shown, options.all));
  if (rows.length > shown.length) writeLine(ctx.stderr, `showing the ${shown.length} most recent; raise --limit to see more`);
  return 0;
}
