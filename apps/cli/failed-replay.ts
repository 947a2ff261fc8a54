import { parseArgs } from 'node:util';
import { BrokerUnavailableError } from '../../libs/broker/index.js';
import { type FailureRecord, NothingToResendError, readFailures } from '../../libs/failed/index.js';
import { topologyNames } from '../../libs/topology/index.js';
import { openResendSession, type ResendSession, withBroker } from './broker.js';
import type { Command } from './command.js';
import { type CliContext, writeLine } from './context.js';
import { NothingMatchedError, UsageError } from './errors.js';
import { matchesFailure } from './failure-filter.js';
import { failuresTable } from './failure-output.js';
import { parseRate, parseTime, parseWithUsage, requireMerchant } from './options.js';
import { Pacer } from './pacer.js';
import { startProgress } from './progress.js';
import { FAILED_REPLAY_USAGE as usage } from './usage.js';

export interface FailedReplayOptions {
  merchantId: string;
  since: Date;
  until?: Date;
  dryRun: boolean;
  rate: number;
}

interface Summary {
  resent: number;
  skipped: number;
  errors: number;
  lastError?: string;
}

export const failedReplay: Command<FailedReplayOptions> = {
  usage,

  parse(args, now) {
    const { values, positionals } = parseWithUsage(usage, () =>
      parseArgs({
        args,
        allowPositionals: true,
        options: {
          merchant: { type: 'string' },
          since: { type: 'string' },
          until: { type: 'string' },
          'dry-run': { type: 'boolean', default: false },
          rate: { type: 'string', default: '50' },
          help: { type: 'boolean', short: 'h' },
        },
      }),
    );
    if (values.help) return 'help';
    if (positionals.length > 0) throw new UsageError(`unexpected argument ${positionals[0]}`, usage);
    const merchantId = requireMerchant(values.merchant, 'failed replay', usage);
    if (values.since === undefined) throw new UsageError('failed replay needs --since <time>: the start of the outage', usage);
    const since = parseTime('since', values.since, now, usage);
    const until = values.until === undefined ? undefined : parseTime('until', values.until, now, usage);
    if (until && since >= until) throw new UsageError('--since must be before --until', usage);
    return { merchantId, since, until, dryRun: values['dry-run'], rate: parseRate(values.rate, usage) };
  },

  async run(options, ctx) {
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
  },
};

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
