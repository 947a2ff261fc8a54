import { randomUUID } from 'node:crypto';
import type { Options } from 'amqplib';
import { type BrokerConnection, type Delivery, type HeldMessage, moveMessage } from '../../../libs/broker/index.js';
import { copyHeaders, HEADERS, type ScalarHeaders } from '../../../libs/contracts/index.js';
import { appendResolution, failureEntryHeaders } from '../../../libs/failed/index.js';
import type { Logger } from '../../../libs/logger/index.js';
import type { DeliveryObserver, Outcome } from '../../../libs/metrics/index.js';
import type { RetryPolicy } from '../../../libs/retry-policy/index.js';
import { appendScheduled, type RetryWatch, type ScheduledRetry } from '../../../libs/stranded-retries/index.js';
import type { TopologyNames } from '../../../libs/topology/index.js';
import type { Decision } from './decide.js';
import type { IntakeEvent } from './intake.js';
import { publishIn, type Span, spanLogFields } from '../../../libs/tracing/index.js';

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

export interface EffectDeps {
  broker: BrokerConnection;
  names: TopologyNames;
  policy: RetryPolicy;
  logger: Logger;
  observer: DeliveryObserver;
  retryWatch?: RetryWatch;
  now: () => Date;
  /** Waits between tries of a move the broker did not take, before the delivery goes back to its queue. */
  moveBackoffMs: readonly number[];
  stopping: () => boolean;
}

/**
 * The effect: carries out the decision, and settles the delivery last. Every outcome ends in
 * exactly one ack (delivered, skipped, superseded, or once its copy is confirmed in a tier,
 * `failed` or `invalid`) or one return to the queue.
 */
export class EffectStage {
  readonly stats: DispatcherStats = { delivered: 0, deferred: 0, circuitOpen: 0, retried: 0, failed: 0, invalid: 0, skipped: 0, requeued: 0, superseded: 0 };
  /** winston formats a message before its transports drop it by level: skip debug on the hot path. */
  private readonly debug: boolean;

  constructor(private readonly deps: EffectDeps) {
    this.debug = deps.logger.isDebugEnabled();
  }

  async apply(delivery: Delivery, intake: IntakeEvent | undefined, decision: Decision, now: Date, span?: Span): Promise<void> {
    const { logger } = this.deps;
    switch (decision.kind) {
      case 'superseded':
        // Another copy of this wait arrived first (a recovered copy, or a publish made again after
        // its confirm was lost, or a resend sent twice): that copy is the one delivered.
        this.count('superseded', 'superseded', 'unknown');
        logger.info('copy dropped: another copy of the same wait arrived first', { key: decision.key, ...spanLogFields(span) });
        return delivery.ack();
      case 'invalid':
        return this.park(delivery, decision.code, decision.detail, span);
      case 'returned':
        return delivery.nack(true);
    }
    if (!intake) throw new Error(`effect: ${decision.kind} needs the intake`);
    switch (decision.kind) {
      case 'delivered':
        this.count('delivered', 'delivered', intake.event, intake.test);
        if (this.debug) logger.debug('webhook delivered', { ...logFields(intake), attempt: decision.attempt, status: decision.status, ...spanLogFields(span) });
        return delivery.ack();
      case 'skipped':
        this.count('skipped', 'skipped', intake.event, intake.test);
        logger.info(decision.why === 'event-not-subscribed' ? 'webhook skipped: event not subscribed' : 'webhook skipped: not set up or disabled', { ...logFields(intake), why: decision.why, ...spanLogFields(span) });
        return delivery.ack();
      case 'defer': {
        const headers = this.waitingHeaders(delivery, intake);
        headers[HEADERS.deferrals] = intake.deferrals + 1;
        if (!(await this.move(delivery, this.deps.names.retry(decision.tier), headers, intake.event, decision.tier, span))) return;
        this.count('deferred', 'deferred', intake.event, intake.test);
        if (this.debug) logger.debug('delivery deferred: endpoint busy', { merchantId: intake.merchantId, reference: intake.references[0], ...spanLogFields(span) });
        return;
      }
      case 'postpone': {
        const headers = this.waitingHeaders(delivery, intake);
        headers[HEADERS.postponements] = intake.postponements + 1;
        if (!(await this.move(delivery, this.deps.names.retry(decision.tier), headers, intake.event, decision.tier, span))) return;
        this.count('circuitOpen', 'circuit_open', intake.event, intake.test);
        if (this.debug) logger.debug('delivery postponed: circuit open', { merchantId: intake.merchantId, reference: intake.references[0], delayMs: this.deps.policy.delayOf(decision.tier), ...spanLogFields(span) });
        return;
      }
      case 'retry': {
        const headers = this.webhookHeaders(delivery, intake);
        headers[HEADERS.attempts] = decision.attempt;
        headers[HEADERS.lastError] = decision.error.slice(0, 500);
        headers[HEADERS.lastAttemptAt] = now.toISOString();
        if (decision.status !== undefined) headers[HEADERS.lastStatus] = decision.status;
        if (!(await this.move(delivery, this.deps.names.retry(decision.tier), headers, intake.event, decision.tier, span))) return;
        this.count('retried', 'retried', intake.event, intake.test);
        logger.info('webhook attempt failed, retry scheduled', {
          merchantId: intake.merchantId,
          event: intake.event,
          reference: intake.references[0],
          attempt: decision.attempt,
          error: decision.error,
          errorClass: decision.errorClass,
          delayMs: this.deps.policy.delayOf(decision.tier),
          ...spanLogFields(span),
        });
        return;
      }
      case 'failed': {
        const headers = failureEntryHeaders(this.webhookHeaders(delivery, intake), {
          reason: decision.reason,
          failedAt: now,
          attempts: decision.attempts,
          lastError: decision.error,
          lastStatus: decision.status,
          lastAttemptAt: decision.attempted ? now : undefined,
        });
        if (!(await this.move(delivery, this.deps.names.failed, headers, intake.event, undefined, span))) return;
        this.count('failed', 'failed', intake.event, intake.test);
        this.deps.observer.failed(decision.reason);
        logger.warn('webhook failed', { merchantId: intake.merchantId, event: intake.event, reference: intake.references[0], reason: decision.reason, attempts: decision.attempts, error: decision.error, errorClass: decision.errorClass, ...spanLogFields(span) });
        return;
      }
    }
  }

  /**
   * A resent webhook reached dispatch: resolve its failed entry, in case the resender died between
   * its republish and its own resolution, so that a later resend does not send it a second time.
   * Idempotent: resolving a resolved entry changes nothing.
   */
  async recordResent(intake: IntakeEvent, offset: number, span?: Span): Promise<void> {
    // The webhook-id too: if `failed` was deleted since the resend, another entry may sit at this offset.
    const resolution = { merchantId: intake.merchantId, resolved: [{ offset, references: intake.references, webhookId: intake.webhookId }] };
    try {
      await publishIn(span, this.deps.names.failed, undefined, intake.webhookId, () =>
        appendResolution(this.deps.broker, this.deps.names.failed, resolution, { reference: intake.references[0]!, deadlineMs: 5_000 }),
      );
    } catch (err) {
      // The resender's own resolution normally covers it; this one only closes a crash window.
      this.deps.logger.warn('resolution of a resent webhook not recorded', { merchantId: intake.merchantId, offset, error: (err as Error).message, ...spanLogFields(span) });
    }
  }

  private count(stat: keyof DispatcherStats, outcome: Outcome, event: string, test = false): void {
    this.stats[stat]++;
    this.deps.observer.outcome(outcome, event);
    if (test) this.deps.observer.test(outcome);
  }

  private carried(delivery: Delivery): ScalarHeaders {
    const { message } = delivery;
    return copyHeaders(message.properties.headers, { from: 'delivery', fromUpstream: message.fields.exchange === this.deps.names.events });
  }

  /** Our bookkeeping for a message that waits in a retry tier without an attempt being made. */
  private waitingHeaders(delivery: Delivery, intake: IntakeEvent): ScalarHeaders {
    return {
      ...this.carried(delivery),
      [HEADERS.attempts]: intake.attempts,
      [HEADERS.deferrals]: intake.deferrals,
      [HEADERS.postponements]: intake.postponements,
      [HEADERS.webhookId]: intake.webhookId,
      [HEADERS.firstSeenAt]: intake.firstSeenAt,
    };
  }

  /** What every copy about this webhook says, whatever happens next. */
  private webhookHeaders(delivery: Delivery, intake: IntakeEvent): ScalarHeaders {
    const headers: ScalarHeaders = {
      ...this.carried(delivery),
      [HEADERS.merchantId]: intake.merchantId,
      [HEADERS.event]: intake.event,
      [HEADERS.webhookId]: intake.webhookId,
      [HEADERS.firstSeenAt]: intake.firstSeenAt,
    };
    // An operational event (the platform's endpoint) has no reference.
    if (intake.references[0]) headers[HEADERS.reference] = intake.references[0];
    if (intake.references[1]) headers[HEADERS.tnxRef] = intake.references[1];
    return headers;
  }

  private async park(delivery: Delivery, code: string, detail: string, span: Span | undefined): Promise<void> {
    const { message } = delivery;
    const moved = await this.move(delivery, this.deps.names.invalid, {
      ...this.carried(delivery),
      [HEADERS.invalidCode]: code,
      [HEADERS.invalidReason]: `${code}: ${detail}`.slice(0, 1000),
      [HEADERS.invalidAt]: this.deps.now().toISOString(),
      [HEADERS.originalRoutingKey]: message.fields.routingKey,
    }, 'unknown', undefined, span);
    if (!moved) return;
    this.count('invalid', 'invalid', 'unknown');
    this.deps.logger.warn('message parked as invalid', { code, reason: detail.slice(0, 200), ...spanLogFields(span) });
  }

  /**
   * The one move (libs/broker moveMessage), with a wait of its own in the retries journal for a
   * move into a tier, so a tier that fails to hand it back is noticed. A publish whose outcome is
   * unknown is made again with the same scheduleId and a new copy id: if both land, the first to
   * arrive is delivered, the other dropped. True when moved.
   */
  private async move(delivery: Delivery, queue: string, headers: ScalarHeaders, event: string, tier: number | undefined, span: Span | undefined): Promise<boolean> {
    const { message } = delivery;
    const wait = tier === undefined ? undefined : { scheduleId: randomUUID(), dueAt: this.deps.now().getTime() + this.deps.policy.delayOf(tier) };
    const base: ScalarHeaders = wait ? { ...headers, [HEADERS.scheduleId]: wait.scheduleId, [HEADERS.dueAt]: wait.dueAt } : headers;
    const webhookId = typeof headers[HEADERS.webhookId] === 'string' ? (headers[HEADERS.webhookId] as string) : undefined;
    const held: HeldMessage = {
      content: message.content,
      properties: message.properties,
      get live() {
        return delivery.live;
      },
      ack: () => delivery.ack(),
      nack: (requeue) => delivery.nack(requeue),
    };
    // With tracing on, a producer span whose context the copy carries: the next delivery continues the webhook's trace.
    const result = await publishIn(span, queue, base, webhookId ?? '', () => moveMessage(this.deps.broker, held, queue, {
      backoffMs: this.deps.moveBackoffMs,
      webhookId,
      headers: wait ? () => ({ ...base, [HEADERS.copyId]: randomUUID() }) : () => base,
      afterPublish: wait
        ? (properties) => {
            // Back from a wait: its body is where that wait's entry points (the watch holds it by wait, not by webhook).
            const cameFrom = message.properties.headers?.[HEADERS.scheduleId];
            const bodyOffset = typeof cameFrom === 'string' ? this.deps.retryWatch?.bodyOffsetOf(cameFrom) : undefined;
            return this.journal({ ...wait, queue, content: message.content, properties, bodyOffset });
          }
        : undefined,
      givingUp: this.deps.stopping,
      onRetry: (err, retry, giveUp) =>
        this.deps.logger.error(giveUp ? 'message could not be moved; returned to its queue' : 'message could not be moved; retrying', { queue, error: err.message, retry, ...spanLogFields(span) }),
    }));
    if (result === 'channel-lost') this.deps.logger.warn('delivery channel lost before its move; the broker redelivers it', { queue, ...spanLogFields(span) });
    if (result === 'requeued') this.count('requeued', 'requeued', event);
    return result === 'moved';
  }

  /**
   * A wait the journal does not hold cannot be recovered if its tier stalls, so the append (read
   * back by the watch, which holds what it read even if the stream loses it) is tried again with
   * the move's backoff while the delivery stays unacked (a journal stream that lost its leader is
   * back within seconds). After the last try the move completes and the watch goes on appending
   * it in the background, so a journal down for minutes does not hold every failing delivery's slot.
   */
  private async journal(retry: ScheduledRetry & { properties: Options.Publish }): Promise<void> {
    for (let attempt = 0; ; attempt++) {
      try {
        if (this.deps.retryWatch) await this.deps.retryWatch.schedule(retry, 10_000);
        else await appendScheduled(this.deps.broker, this.deps.names.retries, retry, 10_000);
        return;
      } catch (err) {
        if (attempt >= this.deps.moveBackoffMs.length || this.deps.stopping()) {
          // The message is in its tier: only the watch's safety net is missing for it.
          if (this.deps.retryWatch && !this.deps.stopping()) {
            this.deps.logger.warn('retry not recorded in the journal yet; appending it again in the background', { queue: retry.queue, scheduleId: retry.scheduleId, error: (err as Error).message });
            this.deps.retryWatch.keepScheduling(retry);
          } else {
            this.deps.logger.warn('retry not recorded in the journal', { queue: retry.queue, scheduleId: retry.scheduleId, error: (err as Error).message });
          }
          return;
        }
        await new Promise((resolve) => setTimeout(resolve, this.deps.moveBackoffMs[attempt]));
      }
    }
  }
}

/** A webhook's fields for a log line, built only where a line is written: the delivered path runs per delivery. */
function logFields(intake: IntakeEvent) {
  return { merchantId: intake.merchantId, event: intake.event, reference: intake.references[0], webhookId: intake.webhookId };
}
