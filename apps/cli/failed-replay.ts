import type { Command } from 'commander';
import { BrokerUnavailableError } from '../../libs/broker/index.js';
import {
  EndpointDeletedError,
  EventNotSubscribedError,
  type FailureRow,
  NothingToResendError,
  receiverOf,
  type ResendService,
  type ResendTarget,
  WebhookDisabledError,
} from '../../libs/failed/index.js';
import { topologyNames } from '../../libs/topology/index.js';
import { resendService, withBroker, withFailures } from './broker.js';
import { action } from './command.js';
import { type CliContext, type CliIo, writeLine } from './context.js';
import { NothingMatchedError, UsageError } from './errors.js';
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
        'failed in the window (the failure index in PostgreSQL, DATABASE_URL), one webhook at a time through the same ' +
        'resend as the API, with its checks: nothing is resent while every endpoint of the merchant is disabled or none is set up. ' +
        'Each failure goes to the endpoint it failed on. Shows progress on stderr and ends with a summary: resent, skipped ' +
        '(resent meanwhile, of an event its endpoint no longer receives, or of an endpoint disabled or deleted since: left failed), errors.',
    )
    .option('--merchant <id>', 'the merchant (required)')
    .option('--since <time>', 'start of the window (required)')
    .option('--until <time>', 'end of the window (default: now)')
    .option('--rate <n>', 'at most n webhooks a second', '50')
    .option('--dry-run', 'publish nothing; print what would be resent', false)
    .addHelpText('after', `\n${TIME}\n${EXIT} (1 also when some resends failed or every endpoint is disabled; 3: nothing unresolved in the window, or no such merchant)`)
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

/** At most this many failures in one replay: a larger window is replayed in parts. */
const MAX_REPLAY = 100_000;

async function run(options: FailedReplayOptions, ctx: CliContext): Promise<number> {
  const { merchantId } = options;
  const names = topologyNames(ctx.config.TOPOLOGY_PREFIX);
  return withFailures(ctx.config, async (store, merchantOf) => {
    const candidates = (await store.list({ merchantId, since: options.since, until: options.until, unresolvedOnly: true, limit: MAX_REPLAY })).reverse();
    if (candidates.length === 0) throw new NothingMatchedError(`no unresolved failed webhook of merchant ${merchantId} in the window`);
    // The API's checks, before anything (the dry run too): a disabled webhook stops the replay.
    const merchant = await merchantOf(merchantId);
    receiverOf(merchant);
    if (options.dryRun) {
      writeLine(ctx.stdout, failuresTable(candidates, false));
      writeLine(ctx.stdout, `dry run: would resend ${candidates.length} webhook(s) of merchant ${merchantId}; nothing was published`);
      return 0;
    }
    const summary = await withBroker(ctx.config, [names.dispatch], async (broker) => {
      const resend = resendService(broker, store, ctx.config.TOPOLOGY_PREFIX);
      try {
        return await replay(resend, merchant, candidates, options.rate, ctx);
      } finally {
        await resend.drain();
      }
    });
    writeLine(ctx.stdout, `replay of merchant ${merchantId}: resent ${summary.resent}, skipped ${summary.skipped}, errors ${summary.errors}`);
    if (summary.errors > 0) {
      writeLine(ctx.stderr, `webhooks: some resends failed; the last error: ${summary.lastError ?? 'unknown'}. Run the replay again to retry them.`);
      return 1;
    }
    // Everything was resent by someone else meanwhile: nothing was done, as with no match.
    return summary.resent === 0 ? 3 : 0;
  });
}

async function replay(resend: ResendService, merchant: ResendTarget, candidates: FailureRow[], rate: number, ctx: CliContext): Promise<Summary> {
  const summary: Summary = { resent: 0, skipped: 0, errors: 0 };
  const pacer = new Pacer(rate);
  const progress = startProgress('replay', candidates.length, ctx.stderr);
  let brokerGone = false;
  try {
    for (const failure of candidates) {
      if (brokerGone) {
        summary.errors++;
      } else {
        await pacer.take(1);
        try {
          // Each failure to its own endpoint (a row written before endpoints: every row of the webhook, the first endpoint's).
          summary.resent += await resend.resendWebhook(merchant, failure.webhookId, failure.endpointId ?? undefined);
        } catch (err) {
          if (err instanceof NothingToResendError || err instanceof EventNotSubscribedError || err instanceof EndpointDeletedError || (err instanceof WebhookDisabledError && err.endpointId !== undefined)) {
            // Resent since the window was read (e.g. by the merchant), of an event no longer received, or of
            // an endpoint disabled or deleted since: left failed.
            summary.skipped++;
          } else {
            summary.errors++;
            summary.lastError = (err as Error).message;
            // Each further resend would wait for a connection in vain: count the rest as errors.
            brokerGone = err instanceof BrokerUnavailableError;
          }
        }
      }
      progress.advance(1);
    }
  } finally {
    progress.stop();
  }
  return summary;
}
