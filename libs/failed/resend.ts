import { randomUUID } from 'node:crypto';
import { BrokerUnavailableError, BrokerUnroutableError, type BrokerConnection, copyProperties, sendDeclaring } from '../broker/index.js';
import { copyHeaders, HEADERS, type ScalarHeaders, webhookHeaders } from '../contracts/index.js';
import type { Logger } from '../logger/index.js';
import { Periodic } from '../runtime/periodic.js';
import { within } from '../runtime/timers.js';
import { topologyNames } from '../topology/index.js';
import { ATTR, inSpan, linkActiveSpanTo, publishSpan, SpanKind } from '../tracing/index.js';
import { type Endpoint, legacyEndpointId, receivesEvent } from '../merchants/index.js';
import { CLAIM_LEASE_MS, type ClaimedFailure, type FailedStore, type FailureFilter, type FailureKey, failureKeyOf, RESENDS_PER_WEBHOOK_PER_DAY } from './store.js';
import { NamedError } from '../runtime/named-error.js';

/** What a resend needs to know of the merchant. */
export interface ResendTarget {
  id: string;
  endpoints: ReadonlyArray<Pick<Endpoint, 'id' | 'enabled' | 'events'>>;
}

/** The endpoint (without one named: every endpoint) is off or not set up: a copy would only fail again, so nothing is claimed. */
export class WebhookDisabledError extends NamedError {
  constructor(readonly merchantId: string, readonly endpointId?: string) {
    super(
      endpointId === undefined
        ? `no endpoint of merchant ${merchantId} is enabled (or none is set up); enable one, then resend`
        : `endpoint ${endpointId} of merchant ${merchantId} is disabled; enable it, then resend`,
    );
  }
}

/** Every failure found is of an endpoint deleted since: nowhere to resend it (the entry stays until retention). */
export class EndpointDeletedError extends NamedError {
  constructor(readonly endpointIds: string[]) {
    super(`endpoint ${endpointIds.join(', ')} was deleted; its failed webhooks cannot be resent`);
  }
}

/** Where one failure would be resent, or why it stays failed. */
export type Verdict = { send: string } | { keep: 'disabled' | 'deleted' | 'not-subscribed'; endpointId: string };

/**
 * The checks every resend makes. Before anything is claimed: some endpoint must be on (`only`: that
 * one), else WebhookDisabledError. Per failure: its endpoint must exist, be on and receive the event.
 */
export function receiverOf(target: ResendTarget, only?: string): (failure: { endpointId: string; event: string }) => Verdict {
  const named = only === undefined ? undefined : target.endpoints.find((e) => e.id === only);
  if (named ? !named.enabled : !target.endpoints.some((e) => e.enabled)) throw new WebhookDisabledError(target.id, named?.id);
  return ({ endpointId, event }) => {
    // '': the endpoint its webhook became (0011), also in what a 409 names. None: deleted since.
    const id = endpointId === '' ? legacyEndpointId(target.id) : endpointId;
    const endpoint = target.endpoints.find((e) => e.id === id);
    if (!endpoint) return { keep: 'deleted', endpointId: id };
    if (!endpoint.enabled) return { keep: 'disabled', endpointId: endpoint.id };
    if (!receivesEvent(endpoint, event)) return { keep: 'not-subscribed', endpointId: endpoint.id };
    return { send: endpoint.id };
  };
}

/** The claim and the mark as resent, as PostgreSQL client spans. */
const DB_UPDATE = { kind: SpanKind.CLIENT, attributes: { 'db.system.name': 'postgresql', 'db.operation.name': 'UPDATE', 'db.collection.name': 'failed_webhooks' } };

/** A resent copy not confirmed within this answers 503 resend_outcome_unknown. */
export const RESEND_CONFIRM_DEADLINE_MS = 5_000;

/** How often a mark as resent that PostgreSQL refused is tried again, until it answers. */
const MARK_RETRY_MS = 1_000;

export class NothingToResendError extends NamedError {
  constructor() {
    super('no unresolved failed webhook for this merchant and reference');
  }
}

/** Another resend holds these failures (under way, or its copy may still be delivered): after `retryAfterMs` its lease has run out. */
export class ResendInProgressError extends NamedError {
  constructor(readonly retryAfterMs: number) {
    super(`another resend holds these failed webhooks (under way, or its outcome not known yet); try again in ${Math.ceil(retryAfterMs / 1000)} s`);
  }
}

/** A copy not confirmed in time, or whose channel failed first: it may be delivered, so its claim is kept for its lease (`holdMs`). */
export class ResendOutcomeUnknownError extends BrokerUnavailableError {
  constructor(readonly holdMs: number, options?: { cause?: unknown }) {
    super('resent copy not confirmed; it may still be delivered', options);
  }
}

/** PostgreSQL did not answer the claim, or a renewal of a long resend's lease (said by ResendStoppedError). */
export class FailureIndexUnavailableError extends NamedError {
  constructor(options?: { cause?: unknown }) {
    super('the failure index in PostgreSQL cannot be reached', options);
  }
}

/** A resend stopped by `cause` after `sent` copies went out: those are marked resent, so a retry sends only the rest. */
export class ResendStoppedError extends NamedError {
  constructor(
    readonly sent: number,
    override readonly cause: Error,
  ) {
    super(`${cause.message}; ${sent > 0 ? `${sent} webhook(s) went out before it` : 'nothing was resent'}`, { cause });
  }
}

/** Each failed webhook found was resent RESENDS_PER_WEBHOOK_PER_DAY times in the last 24 hours. */
export class ResendLimitError extends NamedError {
  constructor(readonly retryAfterMs: number) {
    super(`these webhooks were resent ${RESENDS_PER_WEBHOOK_PER_DAY} times in the last 24 hours`);
  }
}

/** Every failed webhook found is of an event its endpoint no longer receives; they stay failed. */
export class EventNotSubscribedError extends NamedError {
  constructor(readonly events: string[]) {
    super(`the endpoints these webhooks failed on no longer receive ${events.join(', ')}`);
  }
}

/**
 * Resends a merchant's failed webhooks once, however many replicas are asked at once: concurrent
 * resends split the failures by claiming them (FailedStore). Each copy goes to `dispatch` (mandatory,
 * confirmed) and is marked resent once confirmed, so a retry does not send it again. What surely did
 * not go out is given back at once; a copy confirmed late may still be stored, so its claim is kept
 * for the lease. Each copy carries which resend it is (x-resend), which orders its attempts in the log.
 */
export class ResendService {
  private readonly dispatch: string;
  private readonly leaseMs: number;
  private readonly confirmDeadlineMs: number;
  /** Marks of late confirms, and marks tried again: drain() waits for them. */
  private readonly pending = new Set<Promise<void>>();
  private draining = false;

  constructor(
    private readonly broker: BrokerConnection,
    private readonly store: FailedStore,
    prefix: string,
    private readonly logger: Logger,
    options: { leaseMs?: number; confirmDeadlineMs?: number } = {},
  ) {
    this.dispatch = topologyNames(prefix).dispatch;
    this.leaseMs = options.leaseMs ?? CLAIM_LEASE_MS;
    this.confirmDeadlineMs = options.confirmDeadlineMs ?? RESEND_CONFIRM_DEADLINE_MS;
  }

  /** A reference's failures (spec 4.1), with receiverOf's checks. */
  resend(merchant: ResendTarget, reference: string): Promise<number> {
    return inSpan('resend', { attributes: { [ATTR.merchantId]: merchant.id, [ATTR.reference]: reference } }, () =>
      this.resendWhere(merchant.id, { reference }, receiverOf(merchant), reference),
    );
  }

  /** One webhook, on every endpoint where it failed or on `endpointId` alone; the same checks. */
  resendWebhook(merchant: ResendTarget, webhookId: string, endpointId?: string): Promise<number> {
    // The rows from before endpoints ('') are the legacy endpoint's.
    const filter: FailureFilter =
      endpointId === undefined ? { webhookId } : { webhookId, endpointIds: endpointId === legacyEndpointId(merchant.id) ? [endpointId, ''] : [endpointId] };
    return inSpan('resend', { attributes: { [ATTR.merchantId]: merchant.id, [ATTR.webhookId]: webhookId } }, () =>
      this.resendWhere(merchant.id, filter, receiverOf(merchant, endpointId), undefined),
    );
  }

  private async resendWhere(merchantId: string, filter: FailureFilter, verdictOf: (failure: ClaimedFailure) => Verdict, reference: string | undefined): Promise<number> {
    const claimId = randomUUID();
    const claimedAt = performance.now();
    const unavailable = (err: unknown): never => {
      throw new ResendStoppedError(0, new FailureIndexUnavailableError({ cause: err }));
    };
    const claimed = await inSpan('claim failed_webhooks', DB_UPDATE, () => this.store.claim(merchantId, filter, claimId, this.leaseMs)).catch(unavailable);
    if (claimed.length === 0) {
      const why = await this.store.whyNone(merchantId, filter, this.leaseMs).catch(unavailable);
      if (why.kind === 'held') throw new ResendInProgressError(why.ms);
      throw why.kind === 'capped' ? new ResendLimitError(why.ms) : new NothingToResendError();
    }
    /** Why failures stay failed: the answer when nothing went. */
    const kept = { disabled: new Set<string>(), deleted: new Set<string>(), 'not-subscribed': new Set<string>() };
    /** Surely not sent: given back. */
    const giveBack: FailureKey[] = [];
    const sent: FailureKey[] = [];
    let failure: unknown;
    const lease = this.keepLease(merchantId, claimId, claimed, claimedAt);
    try {
      for (const [i, webhook] of claimed.entries()) {
        failure ??= lease.lost();
        if (failure !== undefined) {
          giveBack.push(...claimed.slice(i));
          break;
        }
        lease.done(webhook);
        // Its lease ran out before a renewal reached it, and another resend took it: that one sends it.
        if (!lease.holds(webhook)) continue;
        const verdict = verdictOf(webhook);
        if ('keep' in verdict) {
          // The dispatcher would only put it back in failed: leave it there, and say why.
          kept[verdict.keep].add(verdict.keep === 'not-subscribed' ? webhook.event : verdict.endpointId);
          giveBack.push(webhook);
          continue;
        }
        try {
          await this.republish(merchantId, claimId, webhook, verdict.send, reference);
        } catch (err) {
          if (!(err instanceof ResendOutcomeUnknownError)) giveBack.push(webhook);
          failure = err;
          continue;
        }
        sent.push(webhook);
        // Marked at once, so no later resend can claim a copy already sent.
        await inSpan('resolve failed_webhooks', DB_UPDATE, () => this.store.markResent(merchantId, [webhook.webhookId], claimId, webhook.endpointId)).catch((err: unknown) =>
          this.markLater(merchantId, webhook, claimId, err),
        );
      }
    } finally {
      await lease.stop();
    }
    await this.store.release(merchantId, giveBack, claimId).catch((err: unknown) => this.warn('claim not given back; it frees itself after its lease', merchantId, err));
    if (failure !== undefined) throw new ResendStoppedError(sent.length, failure as Error);
    if (sent.length === 0) {
      // What a later resend can mend first; endpoint_deleted only when every failure's endpoint is gone.
      if (kept.disabled.size > 0) throw new WebhookDisabledError(merchantId, [...kept.disabled][0]);
      if (kept['not-subscribed'].size > 0) throw new EventNotSubscribedError([...kept['not-subscribed']]);
      throw kept.deleted.size > 0 ? new EndpointDeletedError([...kept.deleted]) : new NothingToResendError();
    }
    this.logger.info('failed webhooks resent', { merchantId, reference, count: sent.length });
    return sent.length;
  }

  /**
   * Renews the claim every third of its lease while its copies go out. `done(key)`: the rows before
   * it need no renewal. `lost()`: a renewal failed, or none that started in the last two thirds of
   * the lease has ended (PostgreSQL slow to answer, not refusing), so the rows may be free soon, or
   * taken already: nothing more goes out.
   */
  private keepLease(merchantId: string, claimId: string, claimed: readonly FailureKey[], claimedAt: number) {
    let waiting = claimed;
    let held = new Set(waiting.map(failureKeyOf));
    let error: unknown;
    // When the last renewal that ended started: the lease runs from then at the latest.
    let renewedAt = claimedAt;
    const renew = async () => {
      const started = performance.now();
      held = await this.store.renew(merchantId, waiting, claimId);
      renewedAt = started;
    };
    const renewals: Periodic = new Periodic(renew, () => Math.max(1, Math.floor(this.leaseMs / 3)), {
      waitFirst: true,
      failed: (err) => {
        error = new FailureIndexUnavailableError({ cause: err });
        void renewals.stop();
      },
    });
    void renewals.start();
    return {
      holds: (key: FailureKey) => held.has(failureKeyOf(key)),
      done: (key: FailureKey) => (waiting = waiting.slice(waiting.indexOf(key))),
      lost: () =>
        error ?? (performance.now() - renewedAt > (2 * this.leaseMs) / 3 ? new FailureIndexUnavailableError({ cause: new Error('claim not renewed within two thirds of its lease') }) : undefined),
      stop: () => renewals.stop(),
    };
  }

  /** Copies whose confirm, or whose mark as resent, drain() would still wait for: what a caller that stops waiting leaves uncertain. */
  get unsettled(): number {
    return this.pending.size;
  }

  /** Waits for the marks of copies confirmed late; marks still refused are given up. */
  async drain(): Promise<void> {
    this.draining = true;
    await Promise.allSettled([...this.pending]);
  }

  /**
   * A confirmed copy whose mark PostgreSQL refused: tried again until it answers (or the program
   * stops); unmarked past the lease, a later resend would send a second copy. Conditional on this
   * claim, a late mark never marks a row another resend took.
   */
  private markLater(merchantId: string, webhook: FailureKey, claimId: string, err: unknown): void {
    this.warn('resent webhook not marked; tried again until PostgreSQL answers (the dispatcher marks it too)', merchantId, err);
    const retried = (async () => {
      while (!this.draining) {
        await new Promise((resolve) => setTimeout(resolve, MARK_RETRY_MS).unref());
        try {
          await this.store.markResent(merchantId, [webhook.webhookId], claimId, webhook.endpointId);
          this.logger.info('resent webhook marked after PostgreSQL answered again', { merchantId, webhookId: webhook.webhookId });
          return;
        } catch {
          // Still away: the next try.
        }
      }
    })();
    this.pending.add(retried);
    void retried.finally(() => this.pending.delete(retried));
  }

  /**
   * Publishes a copy, resolved when confirmed. Throws BrokerUnavailableError when surely nothing
   * was stored, ResendOutcomeUnknownError when it may have been (no confirm in time, a channel failure).
   */
  private async republish(merchantId: string, claimId: string, webhook: ClaimedFailure, endpointId: string, reference: string | undefined): Promise<void> {
    // A failure only the recorder indexed has no headers: made from the row.
    const headers: ScalarHeaders = webhook.headers
      ? copyHeaders(webhook.headers, { from: 'failure-entry' })
      : webhookHeaders(merchantId, webhook.event, webhook.webhookId, webhook.references);
    headers[HEADERS.resentAt] = new Date().toISOString();
    headers[HEADERS.resend] = webhook.resend;
    // The dispatcher marks the failure resent when it takes this copy, in case this replica dies first.
    headers[HEADERS.claimId] = claimId;
    headers[HEADERS.endpointId] = endpointId;
    if (!this.broker.isConnected) throw new BrokerUnavailableError('not connected to RabbitMQ');
    const webhookId = webhook.webhookId;
    // The copy keeps the webhook's own traceparent; the resend's span links to it.
    if (webhook.headers) linkActiveSpanTo(webhook.headers, { [ATTR.webhookId]: webhookId });
    // No deadline on the publish itself: a confirm that comes after the answer still marks it resent.
    const send = () => this.broker.sendToQueue(this.dispatch, Buffer.from(webhook.content), copyProperties({}, headers, webhookId));
    // Returned, dispatch was deleted: declared again, and sent once more.
    const publish = publishSpan(this.dispatch, undefined, { [ATTR.webhookId]: webhookId }, () => sendDeclaring(this.broker, send));
    try {
      if (await within(this.confirmDeadlineMs, publish.then(() => true))) return;
    } catch (err) {
      if (err instanceof BrokerUnroutableError) throw new BrokerUnavailableError('no queue took the resent copy', { cause: err });
      // Nacked or its channel closed: the broker may have stored it all the same.
      this.logger.warn('resent copy not confirmed; its claim holds for its lease', { merchantId, reference, error: (err as Error).message });
      throw new ResendOutcomeUnknownError(this.leaseMs, { cause: err });
    }
    const marked = publish.then(
      async () => {
        this.logger.info('late resent copy confirmed', { merchantId, reference });
        await this.store.markResent(merchantId, [webhookId], claimId, webhook.endpointId).catch((err: unknown) => this.markLater(merchantId, webhook, claimId, err));
      },
      (err: unknown) => this.warn('late resent copy failed; its claim holds for its lease', merchantId, err),
    );
    this.pending.add(marked);
    void marked.finally(() => this.pending.delete(marked));
    throw new ResendOutcomeUnknownError(this.leaseMs);
  }

  private warn(message: string, merchantId: string, err: unknown): void {
    this.logger.warn(message, { merchantId, error: (err as Error).message });
  }
}
