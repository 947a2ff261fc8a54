import type { Command } from 'commander';
import { BrokerUnavailableError } from '../../libs/broker/index.js';
import { type FailureRecord, NothingToResendError, readFailures } from '../../libs/failed/index.js';
import { topologyNames } from '../../libs/topology/index.js';
import { openResendSession, type ResendSession, withBroker } from './broker.js';
import { action } from './command.js';
import { type CliContext, type CliIo, writeLine } from './context.js';
import { NothingMatchedError, UsageError } from './errors.js';
import { matchesFailure } from './failure-filter.js';
import { failuresTable } from './failure-output.js';
import { EXIT, TIME } from './help-text.js';
import { parseRate, parseTime, requireMerchant } from './options.js';
import { Pacer } from './pacer.js';
import { startProgress } from './progress.js';

export interface FailedReplayOptions {
  merchantId: string;
  since: Date;
  until?: Date;
  dryRun: boolean;
  rate: number;
}

interface Raw {
  merchant?: string;
  since?: string;
  until?: string;
  dryRun: boolean;
  rate: string;
}

interface Summary {
  resent: number;
  skipped: number;
  errors: number;
  lastError?: string;
}

export function declareFailedReplay(failed: Command, io: CliIo): void {
  failed
    .command('replay')
    .summary("resends a merchant's failed webhooks of a time window")
    .usage('--merchant <id> --since <time> [--until <time>] [--dry-run] [--rate <per-second>]')
    .description(
      'Bulk recovery after a merchant outage: resends every unresolved failed webhook of the merchant that ' +
        'failed in the window, one reference at a time through the same resend as the API (a reference that ' +
        "also has failures outside the window is resent whole, as the merchant's own resend would). " +
        'Shows progress on stderr and ends with a summary: resent, skipped (resolved meanwhile), errors.',
    )
    .option('--merchant <id>', 'the merchant (required)')
    .option('--since <time>', 'start of the window (required)')
    .option('--until <time>', 'end of the window (default: now)')
    .option('--rate <n>', 'at most n webhooks a second', '50')
    .option('--dry-run', 'publish nothing; print what would be resent', false)
    .addHelpText('after', `\n${TIME}\n${EXIT} (1 also when some resends failed; 3: nothing unresolved in the window)`)
    .action(action(io, check, run));
}

function check(raw: Raw, _args: string[], now: Date): FailedReplayOptions {
  const merchantId = requireMerchant(raw.merchant, 'failed replay');
  if (raw.since === undefined) throw new UsageError('failed replay needs --since <time>: the start of the outage');
  const since = parseTime('since', raw.since, now);
  const until = raw.until === undefined ? undefined : parseTime('until', raw.until, now);
  if (until && since >= until) throw new UsageError('--since must be before --until');
  return { merchantId, since, until, dryRun: raw.dryRun, rate: parseRate(raw.rate) };
}

async function run(options: FailedReplayOptions, ctx: CliContext): Promise<number> {
  const { merchantId } = options;
  const names = topologyNames(ctx.config.TOPOLOGY_PREFIX);
  return withBroker(ctx.config, [names.failed, names.dispatch], async (broker) => {
    const filter = { merchantId, since: options.since, until: options.until };
    const candidates = (await readFailures(broker, names.failed, { from: options.since, match: matchesFailure(filter) })).filter(
      (r) => !r.resolved,
    );
    if (candidates.length === 0) throw new NothingMatchedError(`no unresolved failed webhook of merchant ${merchantId} in the window`);
    const groups = byReference(candidates);

    if (options.dryRun) {
      writeLine(ctx.stdout, failuresTable(candidates, false));
      writeLine(
        ctx.stdout,
        `dry run: would resend ${candidates.length} webhook(s) for ${groups.size} reference(s) of merchant ${merchantId}; nothing was published`,
      );
      return 0;
    }

    const session = await openResendSession(broker, ctx.config.TOPOLOGY_PREFIX);
    let summary: Summary;
    try {
      summary = await replay(session, merchantId, groups, candidates.length, options.rate, ctx);
    } finally {
      await session.close();
    }
    writeLine(ctx.stdout, `replay of merchant ${merchantId}: resent ${summary.resent}, skipped ${summary.skipped}, errors ${summary.errors}`);
    if (summary.errors > 0) {
      writeLine(ctx.stderr, `webhooks: some resends failed; the last error: ${summary.lastError ?? 'unknown'}. Run the replay again to retry them.`);
      return 1;
    }
    // Everything was resolved by someone else meanwhile: nothing was done, as with no match.
    return summary.resent === 0 ? 3 : 0;
  });
}

/** Primary reference → its failures in the window, in stream order: the unit the resend works on. */
function byReference(records: FailureRecord[]): Map<string, FailureRecord[]> {
  const groups = new Map<string, FailureRecord[]>();
  for (const record of records) {
    const reference = record.references[0]!;
    const group = groups.get(reference);
    if (group) group.push(record);
    else groups.set(reference, [record]);
  }
  return groups;
}

async function replay(
  session: ResendSession,
  merchantId: string,
  groups: Map<string, FailureRecord[]>,
  total: number,
  rate: number,
  ctx: CliContext,
): Promise<Summary> {
  const summary: Summary = { resent: 0, skipped: 0, errors: 0 };
  const pacer = new Pacer(rate);
  const progress = startProgress('replay', total, ctx.stderr);
  let brokerGone = false;
  try {
    for (const [reference, records] of groups) {
      const pending = session.index.lookup(merchantId, reference).length;
      if (brokerGone) {
        summary.errors += records.length;
      } else if (pending === 0) {
        summary.skipped += records.length; // resolved since the window was read, e.g. by the merchant
      } else {
        await pacer.take(pending);
        try {
          summary.resent += await session.resend.resend(merchantId, reference);
        } catch (err) {
          if (err instanceof NothingToResendError) {
            summary.skipped += records.length;
          } else {
            summary.errors += records.length;
            summary.lastError = (err as Error).message;
            // Each further resend would wait for a connection in vain: count the rest as errors.
            brokerGone = err instanceof BrokerUnavailableError;
          }
        }
      }
      progress.advance(records.length);
    }
  } finally {
    progress.stop();
  }
  return summary;
}
