import type { ConsumeMessage, Options } from 'amqplib';
import { BrokerUnavailableError, type BrokerConnection, type Consumer, type Delivery } from '../../libs/broker/index.js';
import { ENTRY_TYPES, HEADERS, type ScalarHeaders, scalarHeaders } from '../../libs/contracts/index.js';
import { DeliveryFailedError, WebhookBlockedError, WebhookRejectedError, type WebhookHttpClient } from '../../libs/http/index.js';
import type { Logger } from '../../libs/logger/index.js';
import { type DeliveryObserver, noopObserver, type Outcome } from '../../libs/metrics/index.js';
import { activeWebhook, type MerchantDirectory } from '../../libs/merchants/index.js';
import { WebhookSigner } from '../../libs/signing/index.js';
import { type TopologyNames, topologyNames } from '../../libs/topology/index.js';
import { EndpointGuards, endpointOf } from './endpoint-guards.js';
import { CircuitOpenError, InvalidMessageError } from './errors.js';
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
  /** Requests in flight to one endpoint (a merchant server's origin); default half of concurrency. */
  perEndpointConcurrency?: number;
  /** Consecutive failures that open an endpoint's circuit (default 5), and how long it stays open (30 s, doubling to 10 min). */
  breakerThreshold?: number;
  breakerCooldownMs?: number;
  /** Times a delivery is set aside because its endpoint is busy before it waits for a slot instead. */
  maxDeferrals?: number;
}

export interface DispatcherDeps {
  broker: BrokerConnection;
  merchants: MerchantDirectory;
  http: WebhookHttpClient;
  logger: Logger;
  signer?: WebhookSigner;
  now?: () => Date;
  observer?: DeliveryObserver;
}

export interface DispatcherStats {
  delivered: number;
  deferred: number;
  circuitOpen: number;
  retried: number;
  failed: number;
  invalid: number;
  skipped: number;
}

/**
 * Consumes `dispatch`, POSTs each webhook, and acks only after the outcome is safe: delivered,
 * or re-published with a confirm to the next retry tier, to `failed`, or to `invalid`.
 */
export class Dispatcher {
  readonly stats: DispatcherStats = { delivered: 0, deferred: 0, circuitOpen: 0, retried: 0, failed: 0, invalid: 0, skipped: 0 };
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
    let intake: IntakeEvent;
    try {
      intake = parseIntake(message, this.settings.maxMessageBytes, now);
    } catch (err) {
      if (err instanceof InvalidMessageError) return this.park(delivery, err);
      throw err;
    }
    const merchant = this.deps.merchants.byId(intake.merchantId);
    if (!merchant) {
      return this.park(delivery, new InvalidMessageError('unknown-merchant', `no merchant ${intake.merchantId} in the directory`));
    }
    const webhook = activeWebhook(merchant);
    const meta = { merchantId: intake.merchantId, event: intake.event, reference: intake.references[0], webhookId: intake.webhookId };
    if (!webhook) {
      this.count('skipped', 'skipped', intake.event);
      this.deps.logger.info('webhook skipped: not set up or disabled', meta);
      delivery.ack();
      return;
    }

    const attempt = intake.attempts + 1;
    const endpoint = endpointOf(webhook.url);
    const admission = await this.guards.acquire(endpoint, this.canDefer(delivery.message), () => this.stopping !== undefined);
    if (!admission) {
      // Stopping while this delivery waited for a slot: hand it back untried, once.
      delivery.nack(true);
      return;
    }
    if (admission.kind === 'defer') return this.defer(delivery, intake);
    if (admission.kind === 'open') {
      this.count('circuitOpen', 'circuit_open', intake.event);
      return this.afterFailure(delivery, intake, attempt, new CircuitOpenError(endpoint, admission.failures), now);
    }
    const slot = admission;
    const started = performance.now();
    try {
      const signed = this.signer.sign(webhook.secret, intake.webhookId, intake.body, now);
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
      slot.release(true);
      this.observer.attempt(true, (performance.now() - started) / 1000, intake.event);
      this.count('delivered', 'delivered', intake.event);
      if (this.debug) this.deps.logger.debug('webhook delivered', { ...meta, attempt, status: response.status });
      delivery.ack();
    } catch (err) {
      slot.release(false);
      this.observer.attempt(false, (performance.now() - started) / 1000, intake.event);
      if (!(err instanceof DeliveryFailedError)) throw err;
      await this.afterFailure(delivery, intake, attempt, err, now);
    }
  }

  private count(stat: keyof DispatcherStats, outcome: Outcome, event: string): void {
    this.stats[stat]++;
    this.observer.outcome(outcome, event);
  }

  private canDefer(message: ConsumeMessage): boolean {
    const deferrals = Number(message.properties.headers?.[HEADERS.deferrals] ?? 0);
    return this.settings.retryDelaysMs.length > 0 && deferrals < (this.settings.maxDeferrals ?? 20);
  }

  /**
   * The endpoint is at its in-flight bound and slow: set the delivery aside in the retry tier it
   * would wait in anyway, without counting an attempt, instead of holding a prefetch slot that
   * other merchants need.
   */
  private async defer(delivery: Delivery, intake: IntakeEvent): Promise<void> {
    const tier = Math.min(intake.attempts, this.settings.retryDelaysMs.length - 1);
    const headers = carriedHeaders(delivery.message);
    headers[HEADERS.deferrals] = Number(headers[HEADERS.deferrals] ?? 0) + 1;
    headers[HEADERS.webhookId] = intake.webhookId;
    headers[HEADERS.firstSeenAt] = intake.firstSeenAt;
    await this.move(delivery, this.names.retry(tier), headers);
    this.count('deferred', 'deferred', intake.event);
    if (this.debug) this.deps.logger.debug('delivery deferred: endpoint busy', { merchantId: intake.merchantId, reference: intake.references[0] });
  }

  private async afterFailure(
    delivery: Delivery,
    intake: IntakeEvent,
    attempt: number,
    failure: DeliveryFailedError,
    now: Date,
  ): Promise<void> {
    const headers: ScalarHeaders = {
      ...carriedHeaders(delivery.message),
      [HEADERS.merchantId]: intake.merchantId,
      [HEADERS.event]: intake.event,
      [HEADERS.reference]: intake.references[0]!,
      [HEADERS.webhookId]: intake.webhookId,
      [HEADERS.attempts]: attempt,
      [HEADERS.lastError]: failure.message.slice(0, 500),
      [HEADERS.firstSeenAt]: intake.firstSeenAt,
      [HEADERS.lastAttemptAt]: now.toISOString(),
    };
    if (intake.references[1]) headers[HEADERS.tnxRef] = intake.references[1];
    if (failure.status !== undefined) headers[HEADERS.lastStatus] = failure.status;
    else delete headers[HEADERS.lastStatus];
    const meta = { merchantId: intake.merchantId, event: intake.event, reference: intake.references[0], attempt, error: failure.message };
    const delays = this.settings.retryDelaysMs;

    if (attempt - 1 < delays.length && !(failure instanceof WebhookBlockedError)) {
      const tier = this.tierFor(attempt - 1, failure);
      await this.move(delivery, this.names.retry(tier), headers);
      this.count('retried', 'retried', intake.event);
      this.deps.logger.info('webhook attempt failed, retry scheduled', { ...meta, delayMs: delays[tier] });
      return;
    }
    headers[HEADERS.entryType] = ENTRY_TYPES.failure;
    headers[HEADERS.failedAt] = now.toISOString();
    await this.move(delivery, this.names.failed, headers);
    this.count('failed', 'failed', intake.event);
    this.deps.logger.warn('webhook failed after its last attempt', meta);
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
    await this.move(delivery, this.names.invalid, {
      ...carriedHeaders(message),
      [HEADERS.invalidCode]: reason.code,
      [HEADERS.invalidReason]: reason.message.slice(0, 1000),
      [HEADERS.invalidAt]: this.now().toISOString(),
      [HEADERS.originalRoutingKey]: message.fields.routingKey,
    });
    this.count('invalid', 'invalid', 'unknown');
    this.deps.logger.warn('message parked as invalid', { code: reason.code, reason: reason.detail.slice(0, 200) });
  }

  /** Publish with a confirm, then ack: a crash in between duplicates the message, never loses it. */
  private async move(delivery: Delivery, queue: string, headers: ScalarHeaders): Promise<void> {
    const { message } = delivery;
    const options: Options.Publish = {
      persistent: true,
      contentType: message.properties.contentType ?? 'application/json',
      messageId: message.properties.messageId ?? (headers[HEADERS.webhookId] as string | undefined),
      timestamp: message.properties.timestamp,
      headers,
    };
    await this.deps.broker.sendToQueue(queue, message.content, options);
    delivery.ack();
  }

  private async onUnexpected(delivery: Delivery, err: unknown): Promise<void> {
    if (err instanceof BrokerUnavailableError) {
      // The move was not confirmed: hand the delivery back once; it is retried from the queue.
      this.deps.logger.warn('broker unavailable while moving a message; returned to the queue', { error: err.message });
      delivery.nack(true);
      return;
    }
    this.deps.logger.error('unexpected error handling a message', { error: (err as Error)?.message });
    try {
      await this.park(delivery, new InvalidMessageError('internal-error', String((err as Error)?.message ?? err)));
    } catch {
      delivery.nack(true);
    }
  }
}

/** Upstream's own scalar headers travel along; the broker's dead-letter bookkeeping does not. */
function carriedHeaders(message: ConsumeMessage): ScalarHeaders {
  const headers = scalarHeaders(message.properties.headers);
  for (const key of Object.keys(headers)) {
    if (key.startsWith('x-first-death') || key.startsWith('x-last-death') || key === 'x-delivery-count') delete headers[key];
  }
  return headers;
}
