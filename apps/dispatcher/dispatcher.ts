import type { ConsumeMessage, Options } from 'amqplib';
import {
  BrokerUnavailableError,
  BrokerUnroutableError,
  type BrokerConnection,
  type Consumer,
  type Delivery,
} from '../../libs/broker/index.js';
import { ENTRY_TYPES, FAILED_REASONS, type FailedReason, HEADERS, type ScalarHeaders, scalarHeaders } from '../../libs/contracts/index.js';
import { DeliveryFailedError, WebhookBlockedError, WebhookRejectedError, type WebhookHttpClient } from '../../libs/http/index.js';
import type { Logger } from '../../libs/logger/index.js';
import { type DeliveryObserver, noopObserver, type Outcome } from '../../libs/metrics/index.js';
import { activeWebhook, type MerchantDirectory, receivesEvent, signingSecrets } from '../../libs/merchants/index.js';
import { WebhookSigner } from '../../libs/signing/index.js';
import { appendResolution } from '../../libs/failed/index.js';
import { appendArrived, appendScheduled, type RetryWatch, type ScheduledRetry } from '../../libs/retries/index.js';
import { randomUUID } from 'node:crypto';
import { type TopologyNames, topologyNames } from '../../libs/topology/index.js';
import { type AttemptResult, EndpointGuards, endpointOf } from './endpoint-guards.js';
import { CircuitOpenError, InvalidMessageError, WebhookUnavailableError } from './errors.js';
import { type IntakeEvent, parseIntake } from './intake.js';
import { retryAfterMs } from './retry-after.js';

export interface DispatcherSettings {
  prefix: string;
  retryDelaysMs: readonly number[];
  deliveryTimeoutMs: number;
  concurrency: number;
  maxMessageBytes: number;
  userAgent: string;
  /** How long stop() waits for in-flight deliveries before closing anyway (they return to the queue). */
  drainTimeoutMs?: number;
  /** Requests in flight to one endpoint (a merchant's webhook URL); default half of concurrency. */
  perEndpointConcurrency?: number;
  /** Consecutive failures that open an endpoint's circuit (default 5), and how long it stays open (30 s, doubling to 10 min). */
  breakerThreshold?: number;
  breakerCooldownMs?: number;
  /** Times a delivery is set aside because its endpoint is busy before it waits for a slot instead. */
  maxDeferrals?: number;
  /** Waits between tries of a move the broker did not take, before the delivery goes back to its queue. */
  moveBackoffMs?: readonly number[];
}

export interface DispatcherDeps {
  broker: BrokerConnection;
  merchants: MerchantDirectory;
  http: WebhookHttpClient;
  logger: Logger;
  signer?: WebhookSigner;
  now?: () => Date;
  observer?: DeliveryObserver;
  /** Knows which messages back from a retry tier were already recovered by a copy. */
  retryWatch?: RetryWatch;
}

export interface DispatcherStats {
  delivered: number;
  deferred: number;
  circuitOpen: number;
  retried: number;
  failed: number;
  invalid: number;
  skipped: number;
  requeued: number;
  superseded: number;
}

/**
 * Consumes `dispatch`, POSTs each webhook, and acks only after the outcome is safe: delivered,
 * or re-published with a confirm to the next retry tier, to `failed`, or to `invalid`.
 */
export class Dispatcher {
  readonly stats: DispatcherStats = { delivered: 0, deferred: 0, circuitOpen: 0, retried: 0, failed: 0, invalid: 0, skipped: 0, requeued: 0, superseded: 0 };
  readonly guards: EndpointGuards;
  private readonly names: TopologyNames;
  private readonly signer: WebhookSigner;
  private readonly now: () => Date;
  private readonly observer: DeliveryObserver;
  private consumer?: Consumer;
  /** winston formats a message before its transports drop it by level: skip debug on the hot path. */
  private readonly debug: boolean;
  private readonly inFlight = new Set<Promise<void>>();
  private stopping?: Promise<void>;

  constructor(private readonly deps: DispatcherDeps, private readonly settings: DispatcherSettings) {
    this.names = topologyNames(settings.prefix);
    this.signer = deps.signer ?? new WebhookSigner();
    this.now = deps.now ?? (() => new Date());
    this.observer = deps.observer ?? noopObserver;
    this.debug = deps.logger.isDebugEnabled();
    this.guards = new EndpointGuards({
      maxInFlight: settings.perEndpointConcurrency ?? Math.max(1, Math.ceil(settings.concurrency / 2)),
      failureThreshold: settings.breakerThreshold ?? 5,
      cooldownMs: settings.breakerCooldownMs ?? 30_000,
      maxCooldownMs: Math.max(settings.breakerCooldownMs ?? 30_000, 600_000),
    });
  }

  async start(): Promise<void> {
    this.consumer = await this.deps.broker.consume(this.names.dispatch, {
      prefetch: this.settings.concurrency,
      onMessage: (delivery) => this.track(delivery),
    });
    this.deps.logger.info('dispatcher consuming', {
      queue: this.names.dispatch,
      concurrency: this.settings.concurrency,
      retryTiers: this.settings.retryDelaysMs.length,
    });
  }

  /** Stops taking deliveries and waits for those in flight; safe to call twice. */
  stop(): Promise<void> {
    this.stopping ??= (async () => {
      await this.consumer?.cancel();
      this.guards.wakeAll();
      const drain = Promise.allSettled([...this.inFlight]);
      let timer: NodeJS.Timeout | undefined;
      const timeout = new Promise<'timeout'>((resolve) => {
        timer = setTimeout(() => resolve('timeout'), this.settings.drainTimeoutMs ?? 30_000);
      });
      const outcome = await Promise.race([drain, timeout]);
      clearTimeout(timer);
      if (outcome === 'timeout') {
        this.deps.logger.warn('dispatcher stopped with deliveries in flight; the broker requeues them', {
          inFlight: this.inFlight.size,
        });
      }
    })();
    return this.stopping;
  }

  private track(delivery: Delivery): void {
    const work = this.handle(delivery).catch((err: unknown) => this.onUnexpected(delivery, err));
    this.inFlight.add(work);
    void work.finally(() => this.inFlight.delete(work));
  }

  private async handle(delivery: Delivery): Promise<void> {
    const { message } = delivery;
    const now = this.now();
    const scheduleId = this.scheduleIdOf(message);
    if (scheduleId !== undefined) {
      const recoveredBy = message.properties.headers?.[HEADERS.recoveredBy];
      if (this.deps.retryWatch?.isSuperseded(scheduleId, typeof recoveredBy === 'string' ? recoveredBy : undefined)) {
        // Its tier held it past its time and the retry watch already put a copy back: that copy counts.
        this.count('superseded', 'superseded', 'unknown');
        this.deps.logger.info('late retry dropped: a recovered copy replaced it', { scheduleId });
        delivery.ack();
        return;
      }
      this.noteArrival(scheduleId);
    }
    let intake: IntakeEvent;
    try {
      intake = parseIntake(message, this.settings.maxMessageBytes, now, this.names.events);
    } catch (err) {
      if (err instanceof InvalidMessageError) return this.park(delivery, err);
      throw err;
    }
    if (intake.resentFromOffset !== undefined && intake.attempts === 0 && intake.deferrals === 0 && intake.postponements === 0) {
      await this.recordResent(intake, intake.resentFromOffset);
    }
    const merchant = this.deps.merchants.byId(intake.merchantId);
    const meta = { merchantId: intake.merchantId, event: intake.event, reference: intake.references[0], webhookId: intake.webhookId };
    // A new event for a merchant without an active webhook is not sent (spec 6.3). One already
    // accepted (retrying, resent) goes to failed instead, to be resent once it is back.
    if (!merchant) {
      if (intake.accepted) return this.unavailable(delivery, intake, new WebhookUnavailableError('merchant-removed'), now);
      return this.park(delivery, new InvalidMessageError('unknown-merchant', `no merchant ${intake.merchantId} in the directory`));
    }
    const webhook = activeWebhook(merchant);
    if (!webhook) {
      if (intake.accepted) return this.unavailable(delivery, intake, new WebhookUnavailableError('webhook-disabled'), now);
      this.count('skipped', 'skipped', intake.event);
      this.deps.logger.info('webhook skipped: not set up or disabled', meta);
      delivery.ack();
      return;
    }
    // The merchant chose its events: one it does not receive is skipped like a disabled webhook,
    // and one already accepted when the filter changed goes to failed, resendable if it opts back in.
    if (!receivesEvent(webhook, intake.event)) {
      if (intake.accepted) return this.unavailable(delivery, intake, new WebhookUnavailableError('event-not-subscribed'), now);
      this.count('skipped', 'skipped', intake.event);
      this.deps.logger.info('webhook skipped: event not subscribed', meta);
      delivery.ack();
      return;
    }

    const attempt = intake.attempts + 1;
    const endpoint = endpointOf(webhook.url);
    const spanOver = now.getTime() - Date.parse(intake.resentAt ?? intake.firstSeenAt) >= this.spanMs;
    // A resend is the merchant saying "fixed": its first attempt goes through an open circuit.
    // So does a webhook never attempted whose span is over: nothing reaches failed untried.
    const force = intake.attempts === 0 && (intake.resentAt !== undefined || spanOver);
    const admission = await this.guards.acquire(
      endpoint,
      { merchantId: intake.merchantId, canDefer: this.canDefer(intake), force },
      () => this.stopping !== undefined,
    );
    if (!admission) {
      // Stopping while this delivery waited for a slot: hand it back untried, once.
      delivery.nack(true);
      return;
    }
    if (admission.kind === 'defer') return this.defer(delivery, intake);
    if (admission.kind === 'open') {
      if (!spanOver) return this.postpone(delivery, intake, admission.retryInMs);
      const failure = new CircuitOpenError(endpoint, admission.failures, admission.lastError);
      return this.toFailed(delivery, intake, FAILED_REASONS.circuitOpen, failure, now, {
        [HEADERS.attempts]: intake.attempts,
        // The last real error: this webhook's own, else the endpoint's.
        [HEADERS.lastError]: (intake.lastError ?? failure.message).slice(0, 500),
        ...(intake.lastStatus !== undefined ? { [HEADERS.lastStatus]: intake.lastStatus } : {}),
      });
    }
    const slot = admission;
    const started = performance.now();
    try {
      const signed = this.signer.sign(signingSecrets(webhook, now), intake.webhookId, intake.body, now);
      const response = await this.deps.http.post({
        url: webhook.url,
        body: intake.body,
        timeoutMs: this.settings.deliveryTimeoutMs,
        headers: { 'content-type': 'application/json', 'user-agent': this.settings.userAgent, ...signed },
      });
      if (response.status < 200 || response.status > 299) {
        const retryAfter = response.headers['retry-after'];
        throw new WebhookRejectedError(response.status, typeof retryAfter === 'string' ? retryAfter : undefined);
      }
      slot.release('succeeded');
      this.observer.attempt(true, (performance.now() - started) / 1000, intake.event);
      this.count('delivered', 'delivered', intake.event);
      if (this.debug) this.deps.logger.debug('webhook delivered', { ...meta, attempt, status: response.status });
      delivery.ack();
    } catch (err) {
      slot.release(breakerResult(err), (err as Error)?.message);
      this.observer.attempt(false, (performance.now() - started) / 1000, intake.event);
      if (!(err instanceof DeliveryFailedError)) throw err;
      await this.afterFailure(delivery, intake, attempt, err, now);
    }
  }

  /**
   * A resent webhook reached dispatch: resolve its failed entry, in case the resender died between
   * its republish and its own resolution, so that a later resend does not send it a second time.
   * Idempotent: resolving a resolved entry changes nothing.
   */
  private async recordResent(intake: IntakeEvent, offset: number): Promise<void> {
    const resolution = { merchantId: intake.merchantId, resolved: [{ offset, references: intake.references }] };
    try {
      await appendResolution(this.deps.broker, this.names.failed, resolution, { reference: intake.references[0]!, deadlineMs: 5_000 });
    } catch (err) {
      // The resender's own resolution normally covers it; this one only closes a crash window.
      this.deps.logger.warn('resolution of a resent webhook not recorded', { merchantId: intake.merchantId, offset, error: (err as Error).message });
    }
  }

  /** Only on messages that came back from a retry tier or the retry watch, never on upstream's. */
  private scheduleIdOf(message: ConsumeMessage): string | undefined {
    if (message.fields.exchange === this.names.events) return undefined;
    const id = message.properties.headers?.[HEADERS.scheduleId];
    return typeof id === 'string' && id.length > 0 ? id : undefined;
  }

  /** The wait is over: the journal stops counting it; in the background, it only guards a recovery. */
  private noteArrival(scheduleId: string): void {
    const work = appendArrived(this.deps.broker, this.names.retries, scheduleId, 10_000).catch((err: unknown) => {
      this.deps.logger.warn('retry arrival not recorded; the retry watch may put back a copy', { scheduleId, error: (err as Error).message });
    });
    this.inFlight.add(work);
    void work.finally(() => this.inFlight.delete(work));
  }

  private count(stat: keyof DispatcherStats, outcome: Outcome, event: string): void {
    this.stats[stat]++;
    this.observer.outcome(outcome, event);
  }

  private canDefer(intake: IntakeEvent): boolean {
    return this.settings.retryDelaysMs.length > 0 && intake.deferrals < (this.settings.maxDeferrals ?? 20);
  }

  /** The schedule's total span: how long a webhook may wait, postponements included, before it fails. */
  private get spanMs(): number {
    return this.settings.retryDelaysMs.reduce((sum, delay) => sum + delay, 0);
  }

  /** Our bookkeeping for a message that waits in a retry tier without an attempt being made. */
  private waitingHeaders(delivery: Delivery, intake: IntakeEvent): ScalarHeaders {
    return {
      ...carriedHeaders(delivery.message, this.names.events),
      [HEADERS.attempts]: intake.attempts,
      [HEADERS.deferrals]: intake.deferrals,
      [HEADERS.postponements]: intake.postponements,
      [HEADERS.webhookId]: intake.webhookId,
      [HEADERS.firstSeenAt]: intake.firstSeenAt,
    };
  }

  /**
   * The endpoint is at its in-flight bound and slow: set the delivery aside in the retry tier it
   * would wait in anyway, without counting an attempt, instead of holding a prefetch slot that
   * other merchants need.
   */
  private async defer(delivery: Delivery, intake: IntakeEvent): Promise<void> {
    const tier = Math.min(intake.attempts, this.settings.retryDelaysMs.length - 1);
    const headers = this.waitingHeaders(delivery, intake);
    headers[HEADERS.deferrals] = intake.deferrals + 1;
    if (!(await this.move(delivery, this.names.retry(tier), headers, intake.event, tier))) return;
    this.count('deferred', 'deferred', intake.event);
    if (this.debug) this.deps.logger.debug('delivery deferred: endpoint busy', { merchantId: intake.merchantId, reference: intake.references[0] });
  }

  /**
   * The endpoint's circuit is open: wait in the first tier that outlasts the cooldown, without an
   * attempt and without a request. The schedule's span bounds how long this goes on.
   */
  private async postpone(delivery: Delivery, intake: IntakeEvent, retryInMs: number): Promise<void> {
    const delays = this.settings.retryDelaysMs;
    let tier = delays.findIndex((delay) => delay >= retryInMs);
    if (tier < 0) tier = delays.length - 1;
    const headers = this.waitingHeaders(delivery, intake);
    headers[HEADERS.postponements] = intake.postponements + 1;
    if (!(await this.move(delivery, this.names.retry(tier), headers, intake.event, tier))) return;
    this.count('circuitOpen', 'circuit_open', intake.event);
    if (this.debug) this.deps.logger.debug('delivery postponed: circuit open', { merchantId: intake.merchantId, reference: intake.references[0], delayMs: delays[tier] });
  }

  private async afterFailure(
    delivery: Delivery,
    intake: IntakeEvent,
    attempt: number,
    failure: DeliveryFailedError,
    now: Date,
  ): Promise<void> {
    const attemptHeaders: ScalarHeaders = {
      [HEADERS.attempts]: attempt,
      [HEADERS.lastError]: failure.message.slice(0, 500),
      [HEADERS.lastAttemptAt]: now.toISOString(),
    };
    if (failure.status !== undefined) attemptHeaders[HEADERS.lastStatus] = failure.status;
    const delays = this.settings.retryDelaysMs;

    if (failure instanceof WebhookBlockedError) return this.toFailed(delivery, intake, FAILED_REASONS.blocked, failure, now, attemptHeaders);
    if (attempt - 1 >= delays.length) return this.toFailed(delivery, intake, FAILED_REASONS.attemptsExhausted, failure, now, attemptHeaders);
    const tier = this.tierFor(attempt - 1, failure);
    const headers = { ...this.entryHeaders(delivery, intake), ...attemptHeaders };
    if (!(await this.move(delivery, this.names.retry(tier), headers, intake.event, tier))) return;
    this.count('retried', 'retried', intake.event);
    this.deps.logger.info('webhook attempt failed, retry scheduled', {
      merchantId: intake.merchantId,
      event: intake.event,
      reference: intake.references[0],
      attempt,
      error: failure.message,
      delayMs: delays[tier],
    });
  }

  /** A webhook accepted for delivery whose merchant has no active webhook now: failed, resendable. */
  private unavailable(delivery: Delivery, intake: IntakeEvent, failure: WebhookUnavailableError, now: Date): Promise<void> {
    return this.toFailed(delivery, intake, failure.reason, failure, now, {
      [HEADERS.attempts]: intake.attempts,
      [HEADERS.lastError]: failure.message,
    });
  }

  /** What every entry about this webhook says, whatever happens next. */
  private entryHeaders(delivery: Delivery, intake: IntakeEvent): ScalarHeaders {
    const headers: ScalarHeaders = {
      ...carriedHeaders(delivery.message, this.names.events),
      [HEADERS.merchantId]: intake.merchantId,
      [HEADERS.event]: intake.event,
      [HEADERS.reference]: intake.references[0]!,
      [HEADERS.webhookId]: intake.webhookId,
      [HEADERS.firstSeenAt]: intake.firstSeenAt,
    };
    if (intake.references[1]) headers[HEADERS.tnxRef] = intake.references[1];
    return headers;
  }

  private async toFailed(
    delivery: Delivery,
    intake: IntakeEvent,
    reason: FailedReason,
    failure: DeliveryFailedError,
    now: Date,
    attemptHeaders: ScalarHeaders,
  ): Promise<void> {
    const headers: ScalarHeaders = { ...this.entryHeaders(delivery, intake) };
    delete headers[HEADERS.lastStatus];
    Object.assign(headers, attemptHeaders, {
      [HEADERS.entryType]: ENTRY_TYPES.failure,
      [HEADERS.failedReason]: reason,
      [HEADERS.failedAt]: now.toISOString(),
    });
    if (!(await this.move(delivery, this.names.failed, headers, intake.event))) return;
    this.count('failed', 'failed', intake.event);
    this.observer.failed(reason);
    this.deps.logger.warn('webhook failed', {
      merchantId: intake.merchantId,
      event: intake.event,
      reference: intake.references[0],
      reason,
      attempts: headers[HEADERS.attempts],
      error: failure.message,
    });
  }

  /**
   * The tier after this attempt; a Retry-After on 429 or 503 moves it to the first tier that waits
   * at least that long, never beyond the last: the schedule bounds how long anything waits.
   */
  private tierFor(tier: number, failure: DeliveryFailedError): number {
    const delays = this.settings.retryDelaysMs;
    if (!(failure instanceof WebhookRejectedError) || (failure.status !== 429 && failure.status !== 503)) return tier;
    const wanted = retryAfterMs(failure.retryAfter, this.now());
    if (wanted === undefined || wanted <= delays[tier]!) return tier;
    for (let i = tier; i < delays.length; i++) if (delays[i]! >= wanted) return i;
    return delays.length - 1;
  }

  private async park(delivery: Delivery, reason: InvalidMessageError): Promise<void> {
    const { message } = delivery;
    const moved = await this.move(delivery, this.names.invalid, {
      ...carriedHeaders(message, this.names.events),
      [HEADERS.invalidCode]: reason.code,
      [HEADERS.invalidReason]: reason.message.slice(0, 1000),
      [HEADERS.invalidAt]: this.now().toISOString(),
      [HEADERS.originalRoutingKey]: message.fields.routingKey,
    }, 'unknown');
    if (!moved) return;
    this.count('invalid', 'invalid', 'unknown');
    this.deps.logger.warn('message parked as invalid', { code: reason.code, reason: reason.detail.slice(0, 200) });
  }

  /**
   * Publish (mandatory, confirmed), then ack: a crash in between duplicates the message, never
   * loses it. Nothing is published for a delivery whose channel is gone: the broker has already
   * returned it to dispatch, and a copy would start a second chain of the same webhook. A publish
   * the broker refuses (unroutable, nacked, channel lost) is retried with backoff while the
   * delivery stays unacked where it is, then handed back to its queue: a delivery limit on
   * `dispatch` ends any loop in `invalid`. True when moved.
   */
  private async move(delivery: Delivery, queue: string, headers: ScalarHeaders, event: string, tier?: number): Promise<boolean> {
    const { message } = delivery;
    // A wait of its own in the journal, so a tier that fails to hand it back is noticed.
    const wait = tier === undefined ? undefined : { scheduleId: randomUUID(), dueAt: this.now().getTime() + this.settings.retryDelaysMs[tier]! };
    if (wait) headers = { ...headers, [HEADERS.scheduleId]: wait.scheduleId, [HEADERS.dueAt]: wait.dueAt };
    const options: Options.Publish = {
      persistent: true,
      contentType: message.properties.contentType ?? 'application/json',
      messageId: message.properties.messageId ?? (headers[HEADERS.webhookId] as string | undefined),
      timestamp: message.properties.timestamp,
      headers,
    };
    for (let retry = 0; ; retry++) {
      if (!delivery.live) {
        this.deps.logger.warn('delivery channel lost before its move; the broker redelivers it', { queue });
        return false;
      }
      try {
        await this.deps.broker.sendToQueue(queue, message.content, options);
        if (wait) await this.journal({ ...wait, queue, content: message.content, properties: options });
        delivery.ack();
        return true;
      } catch (err) {
        if (!(err instanceof BrokerUnavailableError || err instanceof BrokerUnroutableError)) throw err;
        const giveUp = retry >= this.moveBackoffMs.length || this.stopping !== undefined;
        this.deps.logger.error(giveUp ? 'message could not be moved; returned to its queue' : 'message could not be moved; retrying', {
          queue,
          error: err.message,
          retry,
        });
        if (giveUp) {
          if (delivery.live) delivery.nack(true);
          this.count('requeued', 'requeued', event);
          return false;
        }
        await new Promise((resolve) => setTimeout(resolve, this.moveBackoffMs[retry]));
      }
    }
  }

  private async journal(retry: ScheduledRetry): Promise<void> {
    try {
      await appendScheduled(this.deps.broker, this.names.retries, retry, 10_000);
    } catch (err) {
      // The message is in its tier: only the watch's safety net is missing for it.
      this.deps.logger.warn('retry not recorded in the journal', { queue: retry.queue, scheduleId: retry.scheduleId, error: (err as Error).message });
    }
  }

  private get moveBackoffMs(): readonly number[] {
    return this.settings.moveBackoffMs ?? [500, 1_000, 2_000, 4_000, 8_000];
  }

  private async onUnexpected(delivery: Delivery, err: unknown): Promise<void> {
    this.deps.logger.error('unexpected error handling a message', { error: (err as Error)?.message });
    try {
      await this.park(delivery, new InvalidMessageError('internal-error', String((err as Error)?.message ?? err)));
    } catch {
      if (delivery.live) delivery.nack(true);
    }
  }
}

/** Our bookkeeping headers: trusted only on messages we moved, never on what upstream published. */
const BOOKKEEPING = new Set<string>([
  HEADERS.attempts,
  HEADERS.deferrals,
  HEADERS.postponements,
  HEADERS.lastStatus,
  HEADERS.lastError,
  HEADERS.firstSeenAt,
  HEADERS.lastAttemptAt,
  HEADERS.failedAt,
  HEADERS.failedReason,
  HEADERS.entryType,
  HEADERS.resentAt,
  HEADERS.resentFromOffset,
  HEADERS.resolvedOffsets,
  HEADERS.checkpointId,
  HEADERS.streamOffset,
]);

const WAIT_HEADERS = new Set<string>([HEADERS.scheduleId, HEADERS.dueAt, HEADERS.retryQueue, HEADERS.recoveredBy]);

/**
 * Upstream's own scalar headers travel along; the broker's dead-letter bookkeeping does not, and
 * neither do bookkeeping headers an upstream set on a message it published to the events exchange.
 */
function carriedHeaders(message: ConsumeMessage, upstreamExchange: string): ScalarHeaders {
  const headers = scalarHeaders(message.properties.headers);
  const fromUpstream = message.fields.exchange === upstreamExchange;
  for (const key of Object.keys(headers)) {
    if (key.startsWith('x-first-death') || key.startsWith('x-last-death') || key === 'x-delivery-count' || key === 'x-acquired-count') delete headers[key];
    // A wait that is over: the next move to a tier starts a wait of its own.
    else if (WAIT_HEADERS.has(key)) delete headers[key];
    else if (fromUpstream && (BOOKKEEPING.has(key) || key.startsWith('x-invalid-'))) delete headers[key];
  }
  return headers;
}

/** A 4xx other than 408 and 429 is an answer, not an outage: see AttemptResult. */
function breakerResult(err: unknown): AttemptResult {
  if (err instanceof WebhookRejectedError && err.status >= 400 && err.status < 500 && err.status !== 408 && err.status !== 429) return 'rejected';
  return 'failed';
}
