import { WaitStore } from '../../libs/waits/index.js';
import { withPostgres } from './broker.js';
import { checkEndpointId, CliCommand, EXIT, formatTable, parseLimit, printListing, requireMerchant, writeLine } from './command.js';

/** A time to the second: with the endpoint's column the table still fits a terminal (--json keeps the milliseconds). */
function toSecond(iso: string): string {
  return iso.replace(/\.\d{3}Z$/, 'Z');
}

export function declareWaitsList(program: CliCommand): void {
  program
    .command('waits')
    .usage('list [options]')
    .description('Webhooks waiting for their next attempt, from PostgreSQL (DATABASE_URL).')
    .command('list')
    .summary('shows waiting webhooks by due time')
    .description(
      'Reads the waits in PostgreSQL (DATABASE_URL), soonest due first: due time, merchant, endpoint (each endpoint\'s delivery of a webhook ' +
        'waits on its own row; - for one written before endpoints), webhook-id, attempts made, ' +
        'why it waits (retry, endpoint-busy, circuit-open, throttled; ordered: behind an earlier webhook of its reference, ' +
        'handed back once that one ends, whatever its due time says; circuit-open for any wait parked behind its endpoint\'s open circuit, ' +
        'due again once it closes, whatever it was written for: --json keeps the reason written and says parked; wait-not-ended for one ' +
        'left out of the pick after WAIT_TAKE_LIMIT takes, its copy parked in invalid, never handed back (moved back, that copy takes ' +
        'it over): --json says spent) and, while a copy is on its way to a dispatcher, until when.',
    )
    .option('--merchant <id>', "only this merchant's")
    .option('--endpoint <id>', "only this endpoint's (ep_…)")
    .option('--limit <n>', 'the N soonest due; a note on stderr says when some were left out', '500')
    .option('--json', 'one JSON array on stdout, for scripts', false)
    .addHelpText('after', `\nEnvironment: DATABASE_URL (the waits' PostgreSQL).\n${EXIT}`)
    .handle(
      (raw: { merchant?: string; endpoint?: string; limit: string; json: boolean }) => ({
        merchantId: raw.merchant === undefined ? undefined : requireMerchant(raw.merchant, 'waits list'),
        endpointId: raw.endpoint === undefined ? undefined : checkEndpointId(raw.endpoint),
        limit: parseLimit(raw.limit),
        json: raw.json,
      }),
      async ({ merchantId, endpointId, limit, json }, ctx) => {
        const needs = 'waits list needs DATABASE_URL: waiting webhooks are kept in PostgreSQL';
        const rows = await withPostgres(ctx.config.DATABASE_URL, needs, { maxConnections: 1, applicationName: 'webhooks-cli waits' }, (database) =>
          new WaitStore(database).list({ merchantId, endpointId, limit: limit + 1 }),
        );
        const shown = rows.slice(0, limit).map((r) => ({
          dueAt: new Date(r.due_at).toISOString(),
          merchantId: r.merchant_id,
          // '': a wait written before endpoints.
          endpointId: r.endpoint_id === '' ? null : r.endpoint_id,
          webhookId: r.webhook_id,
          attempts: r.attempt,
          reason: r.reason,
          handedUntil: r.handed_until ? new Date(r.handed_until).toISOString() : null,
          // Neither is overdue: one waits for an open circuit, one was taken past WAIT_TAKE_LIMIT.
          parked: r.parked,
          spent: r.spent,
        }));
        printListing(ctx, json, shown, 'no webhook is waiting', () =>
          formatTable(
            ['DUE', 'MERCHANT', 'ENDPOINT', 'WEBHOOK-ID', 'ATTEMPTS', 'WHY', 'HANDED UNTIL'],
            shown.map((w) => [toSecond(w.dueAt), w.merchantId, w.endpointId ?? '-', w.webhookId, String(w.attempts), w.spent ? 'wait-not-ended' : w.parked ? 'circuit-open' : w.reason, w.handedUntil ? toSecond(w.handedUntil) : '']),
          ),
        );
        if (rows.length > shown.length) writeLine(ctx.stderr, `showing the ${shown.length} soonest due; raise --limit to see more`);
      },
    );
}
