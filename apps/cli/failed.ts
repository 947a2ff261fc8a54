import { type FailureRow, NothingToResendError, receiverOf, ResendStoppedError } from '../../libs/failed/index.js';
import { withFailures, withResend } from './broker.js';
import { checkEndpointId, checkReference, CliCommand, EXIT, formatTable, INTERRUPTED, NothingMatchedError, parseLimit, parseWindow, printListing, requireMerchant, TIME, truncate, UsageError, writeLine } from './command.js';
import { BROKER_FAULTS_TO_GIVE_UP, replay, report } from './replay.js';

const HEADER = ['FAILED AT', 'MERCHANT', 'ENDPOINT', 'EVENT', 'REFERENCE', 'WEBHOOK ID', 'ATTEMPTS', 'LAST STATUS', 'REASON', 'LAST ERROR'];

function failuresTable(records: FailureRow[], withResolved: boolean): string {
  const header = withResolved ? [...HEADER.slice(0, -1), 'RESOLVED', 'LAST ERROR'] : HEADER;
  const rows = records.map((r) => [
    r.failedAt,
    r.merchantId,
    r.endpointId ?? '-',
    r.event,
    r.references.join(','),
    r.webhookId,
    String(r.attempts),
    r.lastStatus === null ? '-' : String(r.lastStatus),
    r.reason ?? '-',
    ...(withResolved ? [r.resentAt === null ? 'no' : 'yes'] : []),
    truncate(r.lastError ?? '-', 100),
  ]);
  return formatTable(header, rows);
}

/** The JSON shape scripts rely on: every field present, null when the failure does not carry it. */
function failureJson({ reason, resentAt, ...row }: FailureRow): Record<string, unknown> {
  return { ...row, failedReason: reason, resolved: resentAt !== null, resentAt };
}

export function declareFailed(program: CliCommand): void {
  const failed = program
    .command('failed')
    .usage('<list|resend|replay> [options]')
    .description('Failed webhooks, from PostgreSQL (DATABASE_URL): list, resend one reference, replay an outage.');

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
    .handle(
      (raw: { merchant?: string; reference?: string; endpoint?: string; since?: string; until?: string; all: boolean; limit: string; json: boolean }, _args, now) => ({
        merchantId: raw.merchant === undefined ? undefined : requireMerchant(raw.merchant, 'failed list'),
        reference: raw.reference === undefined ? undefined : checkReference(raw.reference),
        endpointId: raw.endpoint === undefined ? undefined : checkEndpointId(raw.endpoint),
        ...parseWindow(raw, now),
        all: raw.all,
        limit: parseLimit(raw.limit),
        json: raw.json,
      }),
      async ({ all, limit, json, ...filter }, ctx) => {
        const rows = await withFailures(ctx.config, (store) => store.list({ ...filter, unresolvedOnly: !all, limit: limit + 1 }));
        const shown = rows.slice(0, limit).reverse();
        printListing(ctx, json, shown.map(failureJson), all ? 'no failed webhook matches' : 'no unresolved failed webhook matches', () => failuresTable(shown, all));
        if (rows.length > shown.length) writeLine(ctx.stderr, `showing the ${shown.length} most recent; raise --limit to see more`);
      },
    );

  failed
    .command('resend')
    .summary("resends a merchant's failed webhooks for one reference")
    .usage('<reference> --merchant <id>')
    .description(
      "Does what the merchant's POST /nucleus/tnx/webhook?reference=<reference> does, for an operator: " +
        'republishes every unresolved failed webhook of that merchant and reference to <TOPOLOGY_PREFIX>.dispatch, ' +
        'each failure to the endpoint it failed on (a webhook fails once per endpoint), ' +
        'with its original webhook-id and fresh attempt counters, claiming them in PostgreSQL (DATABASE_URL) ' +
        'as the API does, so that no replica sends them again. Prints how many were resent; stopped midway (the broker or ' +
        'PostgreSQL lost), it says how many went before (exit 1), and a second run sends only the rest. Makes the API\'s checks first: ' +
        'nothing is resent while every endpoint of the merchant is disabled or none is set up, and a failure whose endpoint ' +
        'is disabled, deleted or no longer receives its event stays failed (merchants from ' +
        'the merchants table).',
    )
    .argument('<reference>', 'the reference, exactly as published (a refund: its refundRef or its tnxRef)')
    .option('--merchant <id>', 'the merchant the webhooks belong to (required)')
    .addHelpText('after', `\n${EXIT} (1 also when nothing went because the endpoints are disabled, deleted or do not receive the event; 3: nothing unresolved for this merchant and reference, or no such merchant)`)
    .handle(
      (raw: { merchant?: string }, [reference]) => ({ merchantId: requireMerchant(raw.merchant, 'failed resend'), reference: checkReference(reference!) }),
      async ({ merchantId, reference }, ctx) => {
        const count = await withFailures(ctx.config, async (store, merchantOf) => {
          const merchant = await merchantOf(merchantId);
          return withResend(ctx.config, store, (resend) =>
            resend.resend(merchant, reference).catch((err: unknown) => {
              if (err instanceof NothingToResendError) throw new NothingMatchedError(`no unresolved failed webhook for merchant ${merchantId} and reference ${reference}`);
              if (err instanceof ResendStoppedError && err.sent > 0) {
                throw new Error(
                  `${err.cause.message}; ${err.sent} webhook(s) of reference ${reference} of merchant ${merchantId} were resent before it stopped: ` +
                    'run it again once the cause is gone, for the rest',
                  { cause: err },
                );
              }
              throw err;
            }),
          );
        });
        writeLine(ctx.stdout, `resent ${count} webhook(s) for reference ${reference} of merchant ${merchantId}`);
      },
    );

  failed
    .command('replay')
    .summary("resends a merchant's failed webhooks of a time window")
    .usage('--merchant <id> --since <time> [--until <time>] [--dry-run] [--rate <per-second>]')
    .description(
      'Bulk recovery after a merchant outage: resends every unresolved failed webhook of the merchant that ' +
        'failed in the window (the failure index in PostgreSQL, DATABASE_URL), one webhook at a time through the same ' +
        'resend as the API, with its checks: nothing is resent while every endpoint of the merchant is disabled or none is set up. ' +
        `Each failure goes to the endpoint it failed on. At most ${MAX_REPLAY} in one run, the most recent: a note on stderr says when the window ` +
        'holds more (run it again for the rest). Shows progress on stderr and ends with a summary: resent, skipped ' +
        '(resent meanwhile, of an event its endpoint no longer receives, or of an endpoint disabled or deleted since: left failed), errors.',
    )
    .option('--merchant <id>', 'the merchant (required)')
    .option('--since <time>', 'start of the window (required)')
    .option('--until <time>', 'end of the window (default: now)')
    .option('--rate <n>', 'at most n webhooks a second', '50')
    .option('--dry-run', 'publish nothing; print what would be resent', false)
    .addHelpText('after', `\n${TIME}\n${EXIT} (1 also when some resends failed, every endpoint is disabled, nothing went because the endpoints are disabled, deleted or do not receive the event, or RabbitMQ stayed unavailable: ${BROKER_FAULTS_TO_GIVE_UP} resends in a row failed for it, and the summary says how many were not tried; 3: nothing unresolved in the window, all resent meanwhile, or no such merchant; ${INTERRUPTED}: Ctrl-C stopped it after the webhook in hand, and the summary says how many were not tried)`)
    .handle(
      (raw: { merchant?: string; since?: string; until?: string; dryRun: boolean; rate: string }, _args, now) => {
        const merchantId = requireMerchant(raw.merchant, 'failed replay');
        if (raw.since === undefined) throw new UsageError('failed replay needs --since <time>: the start of the outage');
        return { merchantId, ...parseWindow(raw, now), dryRun: raw.dryRun, rate: parseRate(raw.rate) };
      },
      ({ merchantId, since, until, dryRun, rate }, ctx) =>
        withFailures(ctx.config, async (store, merchantOf) => {
          const found = await store.list({ merchantId, since, until, unresolvedOnly: true, limit: MAX_REPLAY + 1 });
          const candidates = found.slice(0, MAX_REPLAY).reverse();
          if (candidates.length === 0) throw new NothingMatchedError(`no unresolved failed webhook of merchant ${merchantId} in the window`);
          // The API's checks, before anything (the dry run too).
          const merchant = await merchantOf(merchantId);
          receiverOf(merchant);
          if (found.length > MAX_REPLAY) {
            writeLine(
              ctx.stderr,
              `webhooks: more than ${MAX_REPLAY} unresolved failed webhooks of merchant ${merchantId} in the window: this replay takes the ${MAX_REPLAY} most recent; ` +
                'run it again for the rest (or narrow it with --since and --until)',
            );
          }
          if (dryRun) {
            writeLine(ctx.stdout, failuresTable(candidates, false));
            writeLine(ctx.stdout, `dry run: would resend ${candidates.length} webhook(s) of merchant ${merchantId}; nothing was published`);
            return 0;
          }
          // Reported before the drain, which may give up on unconfirmed copies (exit 1): the summary is said either way.
          return withResend(ctx.config, store, async (resend) => report(merchantId, await ctx.interruptible((interrupted) => replay(resend, merchant, candidates, rate, ctx, interrupted)), ctx));
        }),
    );
}

function parseRate(text: string): number {
  const n = Number(text);
  if (!/^\d+(?:\.\d+)?$/.test(text.trim()) || !(n > 0) || n > 10_000) throw new UsageError('--rate takes a number of webhooks per second above 0, at most 10000');
  return n;
}

/** A larger window is replayed in parts. */
const MAX_REPLAY = 100_000;

