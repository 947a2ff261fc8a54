import { setTimeout as sleep } from 'node:timers/promises';
import cliProgress from 'cli-progress';
import { BrokerUnavailableError } from '../../libs/broker/index.js';
import { EndpointDeletedError, EventNotSubscribedError, type FailureRow, NothingToResendError, ResendOutcomeUnknownError, type ResendService, ResendStoppedError, type ResendTarget, WebhookDisabledError } from '../../libs/failed/index.js';
import { type CliContext, type CliIo, INTERRUPTED, writeLine } from './command.js';

/** Broker faults in a row (a copy unconfirmed, or none sent for want of a connection) after which the broker counts as gone. */
export const BROKER_FAULTS_TO_GIVE_UP = 5;

/** The first pause before a webhook not sent for want of the broker is tried again, doubled each time: BrokerConnection reconnects within 0.2 to 5 s. */
const BROKER_PAUSE_MS = 1_000;

type Summary = { resent: number; skipped: number; errors: number; notTried: number; lastError?: string; kept: Set<string>; gaveUp?: string };

/**
 * `failed replay`'s work: each candidate resent at most `rate` a second, until done or `interrupted`.
 * A broker fault costs one webhook at most: an unconfirmed copy (it may be delivered, its claim held)
 * is one error, a copy surely not sent is tried again after a pause. Only BROKER_FAULTS_TO_GIVE_UP in
 * a row stop the replay, and what it did not send then is not tried, not failed: a rerun takes it.
 */
export async function replay(
  resend: ResendService,
  merchant: ResendTarget,
  candidates: FailureRow[],
  rate: number,
  ctx: Pick<CliContext, 'stderr'>,
  interrupted: AbortSignal,
  options: { brokerPauseMs?: number } = {},
): Promise<Summary> {
  // kept: why skipped failures stay failed (an endpoint disabled or deleted, an event unsubscribed), once each.
  const summary: Summary = { resent: 0, skipped: 0, errors: 0, notTried: 0, kept: new Set<string>() };
  const pauseMs = options.brokerPauseMs ?? BROKER_PAUSE_MS;
  const started = performance.now();
  const progress = startProgress('replay', candidates.length, ctx.stderr);
  let faultsInARow = 0;
  try {
    candidates: for (const [i, failure] of candidates.entries()) {
      // Resend i goes no earlier than i / rate seconds after the first.
      const wait = started + (i * 1000) / rate - performance.now();
      if (wait > 0) await sleep(Math.ceil(wait), undefined, { signal: interrupted }).catch(() => {});
      for (;;) {
        if (interrupted.aborted) {
          summary.notTried = candidates.length - i;
          break candidates;
        }
        const outcome = await resendOne(resend, merchant, failure, summary);
        if (outcome === 'sent') faultsInARow = 0;
        if (typeof outcome === 'string') break;
        if (++faultsInARow >= BROKER_FAULTS_TO_GIVE_UP) {
          // An unconfirmed copy is counted (an error); one surely not sent is left with the rest.
          summary.notTried = candidates.length - i - (outcome.fault === 'unconfirmed' ? 1 : 0);
          summary.gaveUp = outcome.message;
          break candidates;
        }
        if (outcome.fault === 'unconfirmed') break;
        await sleep(pauseMs * 2 ** (faultsInARow - 1), undefined, { signal: interrupted }).catch(() => {});
      }
      progress.advance();
    }
  } finally {
    progress.stop();
  }
  return summary;
}

/** One webhook's resend, counted in `summary`; a broker fault is said apart: 'unsent' (given back, not counted) or 'unconfirmed' (an error). */
async function resendOne(resend: ResendService, merchant: ResendTarget, failure: FailureRow, summary: Summary): Promise<'sent' | 'other' | { fault: 'unsent' | 'unconfirmed'; message: string }> {
  try {
    summary.resent += await resend.resendWebhook(merchant, failure.webhookId, failure.endpointId ?? undefined);
    return 'sent';
  } catch (err) {
    if (err instanceof NothingToResendError || err instanceof EventNotSubscribedError || err instanceof EndpointDeletedError || (err instanceof WebhookDisabledError && err.endpointId !== undefined)) {
      // Resent since the window was read, or no longer sendable: left failed.
      summary.skipped++;
      if (!(err instanceof NothingToResendError)) summary.kept.add(err.message);
      return 'other';
    }
    const stopped = err instanceof ResendStoppedError ? err : undefined;
    summary.resent += stopped?.sent ?? 0;
    if (stopped?.cause instanceof BrokerUnavailableError && !(stopped.cause instanceof ResendOutcomeUnknownError)) {
      // Surely not sent, its claim given back: tried again once the broker is back.
      return { fault: 'unsent', message: stopped.cause.message };
    }
    summary.errors++;
    summary.lastError = (err as Error).message;
    return stopped?.cause instanceof ResendOutcomeUnknownError ? { fault: 'unconfirmed', message: stopped.cause.message } : 'other';
  }
}

/** A live bar at a terminal; in a log or a pipe, whose redraws would fill with escape codes, a line per tenth of `total` (above 0). */
function startProgress(label: string, total: number, stderr: CliIo['stderr']): { advance(): void; stop(): void } {
  if (stderr.isTTY) {
    const bar = new cliProgress.SingleBar(
      { stream: stderr, format: `${label} [{bar}] {percentage}% | {value}/{total} | ETA {eta_formatted}`, hideCursor: true },
      cliProgress.Presets.shades_classic,
    );
    bar.start(total, 0);
    return { advance: () => bar.increment(1), stop: () => bar.stop() };
  }
  let done = 0;
  let tenthsReported = 0;
  return {
    advance() {
      done = Math.min(total, done + 1);
      const tenths = Math.floor((done * 10) / total);
      if (tenths <= tenthsReported) return;
      tenthsReported = tenths;
      writeLine(stderr, `${label}: ${Math.floor((done * 100) / total)}% (${done}/${total})`);
    },
    stop() {},
  };
}

export type ReplaySummary = Awaited<ReturnType<typeof replay>>;

/** The summary on stdout, the last error on stderr; the exit code (1 when it stopped for the broker, 130 for Ctrl-C). */
export function report(merchantId: string, summary: ReplaySummary, ctx: Pick<CliContext, 'stdout' | 'stderr'>): number {
  const cut = summary.notTried > 0;
  writeLine(
    ctx.stdout,
    `replay of merchant ${merchantId}${!cut ? '' : summary.gaveUp === undefined ? ' interrupted' : ' stopped'}: resent ${summary.resent}, skipped ${summary.skipped}, errors ${summary.errors}` +
      (cut ? `; ${summary.notTried} not tried: run it again for them` : ''),
  );
  if (summary.errors > 0) writeLine(ctx.stderr, `webhooks: some resends failed; the last error: ${summary.lastError ?? 'unknown'}. Run the replay again to retry them.`);
  if (summary.kept.size > 0) writeLine(ctx.stderr, `webhooks: some stay failed: ${[...summary.kept].join('; ')}`);
  if (summary.gaveUp !== undefined) {
    writeLine(ctx.stderr, `webhooks: RabbitMQ stayed unavailable (${BROKER_FAULTS_TO_GIVE_UP} resends in a row failed for it; the last: ${summary.gaveUp}): the replay stopped; run it again once the broker is back`);
    return 1;
  }
  if (cut) return INTERRUPTED;
  if (summary.errors > 0) return 1;
  // Nothing went, yet failures are left: an outage not recovered, as failed resend says (1), not "nothing matched".
  if (summary.resent === 0 && summary.kept.size > 0) return 1;
  // Everything was resent by someone else meanwhile: nothing was done, as with no match.
  return summary.resent === 0 ? 3 : 0;
}
