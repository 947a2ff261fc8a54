import type { Command } from 'commander';
import { action, type CliContext, type CliIo, EXIT, NothingMatchedError, parseLimit, requireMerchant, UsageError, writeLine } from './command.js';
import { formatTable, printable } from './table.js';
import { openPostgres } from '../../libs/delivery-store/index.js';
import { WaitStore } from '../../libs/waits/index.js';

interface Raw {
  merchant?: string;
  limit: string;
  json: boolean;
}

interface WaitsListOptions {
  merchantId?: string;
  limit: number;
  json: boolean;
}

export function declareWaitsList(program: Command, io: CliIo): void {
  program
    .command('waits')
    .usage('list [options]')
    .description('Webhooks waiting for their next attempt, from PostgreSQL (DATABASE_URL).')
    .command('list')
    .summary('shows waiting webhooks by due time')
    .description(
      'Reads the waits in PostgreSQL (DATABASE_URL), soonest due first: due time, merchant, webhook-id, attempts made, ' +
        'why it waits (retry, endpoint-busy, circuit-open, throttled) and, while a copy is on its way to a dispatcher, until when.',
    )
    .option('--merchant <id>', "only this merchant's")
    .option('--limit <n>', 'the N soonest due; a note on stderr says when some were left out', '500')
    .option('--json', 'one JSON array on stdout, for scripts', false)
    .addHelpText('after', `\nEnvironment: DATABASE_URL (the waits' PostgreSQL).\n${EXIT}`)
    .action(action(io, check, run));
}

function check(raw: Raw): WaitsListOptions {
  return { merchantId: raw.merchant === undefined ? undefined : requireMerchant(raw.merchant, 'waits list'), limit: parseLimit(raw.limit), json: raw.json };
}

async function run(options: WaitsListOptions, ctx: CliContext): Promise<number> {
  if (!ctx.config.DATABASE_URL) throw new UsageError('waits list needs DATABASE_URL: waiting webhooks are kept in PostgreSQL');
  const database = openPostgres(ctx.config.DATABASE_URL, { maxConnections: 1, applicationName: 'webhooks-cli waits' });
  let rows;
  try {
    rows = await new WaitStore(database).list({ merchantId: options.merchantId, limit: options.limit + 1 });
  } finally {
    await database.close();
  }
  const shown = rows.slice(0, options.limit);
  const json = shown.map((r) => ({
    dueAt: new Date(r.due_at).toISOString(),
    merchantId: r.merchant_id,
    webhookId: r.webhook_id,
    attempts: r.attempt,
    reason: r.reason,
    handedUntil: r.handed_until ? new Date(r.handed_until).toISOString() : null,
  }));
  if (options.json) writeLine(ctx.stdout, JSON.stringify(json));
  if (shown.length === 0) throw new NothingMatchedError('no webhook is waiting');
  if (!options.json) {
    writeLine(ctx.stdout, formatTable(
      ['DUE', 'MERCHANT', 'WEBHOOK-ID', 'ATTEMPTS', 'WHY', 'HANDED UNTIL'],
      json.map((w) => [w.dueAt, printable(w.merchantId), printable(w.webhookId), String(w.attempts), w.reason, w.handedUntil ?? '']),
    ));
  }
  if (rows.length > shown.length) writeLine(ctx.stderr, `showing the ${shown.length} soonest due; raise --limit to see more`);
  return 0;
}
