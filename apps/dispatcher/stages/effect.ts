import { type BrokerConnection, type Delivery, type HeldMessage, moveMessage } from '../../../libs/broker/index.js';
import { copyHeaders, FAILED_REASONS, foreignHeaderBytes, HEADERS, MAX_FOREIGN_HEADER_BYTES, type ScalarHeaders, webhookHeaders } from '../../../libs/contracts/index.js';
import { type FailedStore, failureEntryHeaders } from '../../../libs/failed/index.js';
import type { Logger } from '../../../libs/logger/index.js';
import type { DeliveryObserver, Outcome } from '../../../libs/metrics/index.js';
import type { RetryPolicy } from '../../../libs/retry-policy/index.js';
import { WriteRefusedError } from '../../../libs/runtime/index.js';
import type { TopologyNames } from '../../../libs/topology/index.js';
import type { WaitEnd, WaitPutReason, WaitWriter } from '../../../libs/waits/index.js';
import type { OrderEnd, OrderGate } from '../../../libs/ordering/index.js';
import type { Decision } from './decide.js';
import type { HandBack, IntakeEvent } from './intake.js';
import { publishIn, type Span, spanLogFields } from '../../../libs/tracing/index.js';

/** Failures that say the merchant's webhook can no longer be sent to: its parked waits are handed back to end too. */
const UNSENDABLE: ReadonlySet<string> = new Set([FAILED_REASONS.webhookDisabled, FAILED_REASONS.endpointDisabled, FAILED_REASONS.merchantRemoved]);

/** A hand-back's failure closes its circuit unanswered when nothing, or not the probe's own webhook, can be sent there. */
function closesUnanswered(intake: IntakeEvent, reason: string): boolean {
  return UNSENDABLE.has(reason) || (intake.probe === true && reason === FAILED_REASONS.eventNotSubscribed);
}

/** The destination a wait's producer span names. */
export const WAITS_TABLE = 'webhook_waits';

export interface EffectDeps {
  broker: BrokerConnection;
  names: TopologyNames;
  policy: RetryPolicy;
  logger: Logger;
  observer: DeliveryObserver;
  failures?: FailedStore;
  /** Needed with a retry schedule. */
  waits?: WaitWriter;
  order?: OrderGate;
  now: () => Date;
  moveBackoffMs: readonly number[];
  stopping: () => boolean;
}

/**
 * Carries out the decision, and settles the delivery last: exactly one ack (once its wait is
 * written or its copy confirmed in `failed` or `invalid`) or one return to the queue. `record`
 * (never rejects) runs after the effect it describes, before the ack.
 */
export class EffectStage {
  /** Deliveries by outcome; `ordered`: behind an earlier one of their reference; `fannedOut`: new events for several endpoints. */
  readonly stats = { delivered: 0, deferred: 0, throttled: 0, circuitOpen: 0, retried: 0, failed: 0, invalid: 0, skipped: 0, requeued: 0, superseded: 0, erased: 0, ordered: 0, duplicates: 0, fannedOut: 0 };
  /** winston formats a message before dropping it by level: skipped on the hot path. */
  private readonly debug: boolean;
  private readonly info: boolean;

  constructor(private readonly deps: EffectDeps) {
    this.debug = deps.logger.isDebugEnabled();
    this.info = deps.logger.isInfoEnabled();
  }

  async apply(delivery: Delivery, intake: IntakeEvent | undefined, decision: Decision, now: Date, span?: Span, record: () => Promise<void> = async () => {}): Promise<void> {
    const { logger } = this.deps;
    switch (decision.kind) {
      case 'superseded':
        // Nothing is recorded: the current hand-back's attempt is.
        this.count('superseded', 'superseded', 'unknown');
        logger.info('stale copy of a wait dropped: another hand-back of it is current', { key: decision.key, ...spanLogFields(span) });
        return delivery.ack();
      case 'erased':
        // Not parked, failed or recorded: its merchant's data was deleted, its rows with it.
        this.count('erased', 'erased', 'unknown');
        logger.info("webhook of a deleted merchant dropped", { merchantId: decision.merchantId, webhookId: decision.webhookId, ...spanLogFields(span) });
        return delivery.ack();
      case 'duplicate':
        // Not recorded (the log shows the original); logged at debug, unless its body is upstream's correction.
        this.stats.duplicates++;
        if (decision.changed) {
          logger.warn('repeated upstream message dropped with a body unlike its original: its key was seen within INTAKE_DEDUPE_WINDOW; publish a corrected event with a new messageId', { merchantId: decision.merchantId, webhookId: decision.webhookId, ...spanLogFields(span) });
        } else if (this.debug) logger.debug('repeated upstream message dropped: its key was seen within INTAKE_DEDUPE_WINDOW', { merchantId: decision.merchantId, webhookId: decision.webhookId, ...spanLogFields(span) });
        return delivery.ack();
      case 'invalid':
        return this.park(delivery, decision.code, decision.detail, span, intake, decision.handTaken, decision.places);
      case 'returned':
        return delivery.nack(true);
    }
    if (!intake) throw new Error(`effect: ${decision.kind} needs the intake`);
    // A new webhook answered through the open circuit closes its row; a hand-back's end or next wait closes it itself.
    if ('breakerClosed' in decision && decision.breakerClosed && intake.hand === undefined) this.closeCircuit(intake, decision.breakerClosed, span);
    switch (decision.kind) {
      case 'ordered':
        // Its wait was written with its admission.
        await record();
        this.count('ordered', 'deferred', intake.event, intake.test);
        if (this.debug) logger.debug('webhook waits for an earlier one of its reference', { ...logFields(intake), ...spanLogFields(span) });
        return delivery.ack();
      // Recorded before the wait or the place ends: a kill between leaves its copy to be given again and
      // recorded, where an ended place would drop that copy unrecorded ('ended': superseded).
      case 'delivered':
        await record();
        await this.endWait(delivery, intake, 'answered', span);
        this.count('delivered', 'delivered', intake.event, intake.test);
        if (this.debug) logger.debug('webhook delivered', { ...logFields(intake), attempt: decision.attempt, status: decision.status, ...spanLogFields(span) });
        return delivery.ack();
      case 'skipped':
        await record();
        await this.endWait(delivery, intake, undefined, span);
        this.count('skipped', 'skipped', intake.event, intake.test);
        logger.info(decision.why === 'event-not-subscribed' ? 'webhook skipped: event not subscribed' : 'webhook skipped: not set up or disabled', { ...logFields(intake), why: decision.why, ...spanLogFields(span) });
        return delivery.ack();
      case 'defer': {
        const headers = this.waitingHeaders(delivery, intake);
        headers[HEADERS.deferrals] = intake.deferrals + 1;
        await this.wait(delivery, intake, 'endpoint-busy', headers, this.deps.policy.delayOf(decision.step), record, span);
        this.count('deferred', 'deferred', intake.event, intake.test);
        if (this.debug) logger.debug('delivery deferred: endpoint busy', { merchantId: intake.merchantId, reference: intake.references[0], ...spanLogFields(span) });
        return;
      }
      case 'throttle': {
        // A throttled webhook spends no attempt and no deferral.
        await this.wait(delivery, intake, 'throttled', this.waitingHeaders(delivery, intake), decision.delayMs, record, span);
        this.count('throttled', 'throttled', intake.event, intake.test);
        if (this.debug) logger.debug('delivery throttled', { merchantId: intake.merchantId, reference: intake.references[0], delayMs: decision.delayMs, ...spanLogFields(span) });
        return;
      }
      case 'postpone': {
        const headers = this.waitingHeaders(delivery, intake);
        headers[HEADERS.postponements] = intake.postponements + 1;
        await this.wait(delivery, intake, 'circuit-open', headers, this.deps.policy.delayOf(decision.step), record, span);
        this.count('circuitOpen', 'circuit_open', intake.event, intake.test);
        if (this.debug) logger.debug('delivery postponed: circuit open', { merchantId: intake.merchantId, reference: intake.references[0], delayMs: this.deps.policy.delayOf(decision.step), ...spanLogFields(span) });
        return;
      }
      case 'retry': {
        const headers = this.webhookHeaders(delivery, intake);
        headers[HEADERS.attempts] = decision.attempt;
        headers[HEADERS.lastError] = decision.error.slice(0, 500);
        headers[HEADERS.lastAttemptAt] = now.toISOString();
        if (decision.status !== undefined) headers[HEADERS.lastStatus] = decision.status;
        await this.wait(delivery, intake, 'retry', headers, this.deps.policy.delayOf(decision.step), record, span, decision.circuitMs, decision.closesCircuit);
        this.count('retried', 'retried', intake.event, intake.test);
        if (this.info) logger.info('webhook attempt failed, retry scheduled', { ...logFields(intake), attempt: decision.attempt, error: decision.error, errorClass: decision.errorClass, delayMs: this.deps.policy.delayOf(decision.step), ...spanLogFields(span) });
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
        // Recorded once it is in `failed`; a wait's or a place's failure indexed too, before they end
        // (a crash between must not leave it stale and its failure unfindable). Any other is indexed after its ack.
        const ends = intake.hand !== undefined || intake.ordered === true;
        const index = () => this.index(delivery, intake, decision, headers, now, span);
        const settle = async () => {
          await Promise.all([record(), ends ? index() : undefined]);
          await this.endWait(delivery, intake, decision.closesCircuit === true ? 'answered' : closesUnanswered(intake, decision.reason) ? 'unanswered' : undefined, span);
        };
        if (!(await this.move(delivery, this.deps.names.failed, headers, intake.event, span, settle))) return;
        if (!ends) void index();
        this.count('failed', 'failed', intake.event, intake.test);
        this.deps.observer.failed(decision.reason);
        logger.warn('webhook failed', { ...logFields(intake), reason: decision.reason, attempts: decision.attempts, error: decision.error, errorClass: decision.errorClass, ...spanLogFields(span) });
        return;
      }
    }
  }

  /** The failure, resendable at once; never rejects: a write that fails is left to the recorder. */
  private async index(delivery: Delivery, intake: IntakeEvent, decision: Extract<Decision, { kind: 'failed' }>, headers: ScalarHeaders, now: Date, span: Span | undefined): Promise<void> {
    const { merchantId, webhookId, endpointId, resend, event, references } = intake;
    const { reason, attempts, status: lastStatus, error: lastError } = decision;
    await this.deps.failures?.record({
      merchantId, webhookId, endpointId, failedAt: now, resend, event, references, reason, attempts, lastStatus, lastError,
      content: delivery.message.content.toString('utf8'), headers,
    }).catch((err: unknown) => {
      this.deps.logger.warn('failure not indexed; the recorder indexes it from the delivery log', { merchantId, webhookId, error: (err as Error).message, ...spanLogFields(span) });
    });
  }

  /** Not waited for: left unwritten (PostgreSQL away, the dispatcher stopping), the row's next probe closes it. */
  private closeCircuit(intake: IntakeEvent, endpointId: string, span: Span | undefined): void {
    // The endpoint it went to, and its waits' own key ('' for a copy from before endpoints).
    for (const key of new Set([endpointId, intake.endpointId ?? ''])) {
      this.deps.waits?.closeCircuit({ merchantId: intake.merchantId, endpointId: key }).catch((err: unknown) => {
        this.deps.logger.warn("circuit's row not closed; its next probe closes it", { merchantId: intake.merchantId, endpointId: key, error: (err as Error)?.message, ...spanLogFields(span) });
      });
    }
  }

  /** A resent copy reached dispatch: its failure marked resent, in case the resender died before its own mark. */
  markResent(intake: IntakeEvent, claimId: string, span?: Span): void {
    this.deps.failures?.markResent(intake.merchantId, [intake.webhookId], claimId, intake.endpointId).catch((err: unknown) => {
      this.deps.logger.warn('resent webhook not marked; its claim frees it after its lease', { merchantId: intake.merchantId, webhookId: intake.webhookId, error: (err as Error).message, ...spanLogFields(span) });
    });
  }

  private count(stat: keyof EffectStage['stats'], outcome: Outcome, event: string, test = false): void {
    this.stats[stat]++;
    this.deps.observer.outcome(outcome, event);
    if (test) this.deps.observer.test(outcome);
  }

  private carried(delivery: Pick<Delivery, 'message'>): ScalarHeaders {
    const { message } = delivery;
    return copyHeaders(message.properties.headers, { from: 'delivery', fromUpstream: message.fields.exchange === this.deps.names.events });
  }

  /** What every copy of this webhook carries. */
  private baseHeaders(delivery: Pick<Delivery, 'message'>, intake: IntakeEvent): ScalarHeaders {
    return {
      ...this.carried(delivery),
      [HEADERS.webhookId]: intake.webhookId,
      [HEADERS.firstSeenAt]: intake.firstSeenAt,
      ...(intake.ordered ? { [HEADERS.ordered]: true } : {}),
      ...(intake.endpointId !== undefined ? { [HEADERS.endpointId]: intake.endpointId } : {}),
    };
  }

  /** Our bookkeeping for a webhook that waits without an attempt being made (also an 'ordered' wait's). */
  waitingHeaders(delivery: Pick<Delivery, 'message'>, intake: IntakeEvent): ScalarHeaders {
    return { ...this.baseHeaders(delivery, intake), [HEADERS.attempts]: intake.attempts, [HEADERS.deferrals]: intake.deferrals, [HEADERS.postponements]: intake.postponements };
  }

  /** A copy's headers with the webhook's merchant, event and references (a retry's wait, a failure). */
  private webhookHeaders(delivery: Delivery, intake: IntakeEvent): ScalarHeaders {
    return { ...this.baseHeaders(delivery, intake), ...webhookHeaders(intake.merchantId, intake.event, intake.webhookId, intake.references) };
  }

  /** A fan-out share its walk could not settle: a copy for that endpoint to dispatch. True when handed on. */
  handOn(delivery: Delivery, intake: IntakeEvent, span: Span | undefined): Promise<boolean> {
    return this.move(delivery, this.deps.names.dispatch, this.baseHeaders(delivery, intake), intake.event, span);
  }

  private async park(delivery: Delivery, code: string, detail: string, span: Span | undefined, intake?: IntakeEvent, handTaken?: HandBack, places: readonly OrderEnd[] = []): Promise<void> {
    const { message } = delivery;
    // An ordered head parked ends its place (after the move, before the ack), a current hand-back its
    // wait, a copy that failed intake the places an earlier walk took. A parked message is in no log.
    const ends = handTaken ?? (intake?.hand === undefined && intake?.ordered === true ? intake : undefined);
    const order = this.deps.order;
    const settle = async () => {
      if (order && places.length > 0 && this.given(delivery, undefined, span)) return;
      await Promise.all([ends && this.endWait(delivery, ends, undefined, span), ...(order ? places.map((place) => this.endPlace(place)) : [])]);
    };
    // Headers too large to publish cannot go with it either.
    const carried = this.carried(delivery);
    const moved = await this.move(delivery, this.deps.names.invalid, {
      ...(foreignHeaderBytes(carried) > MAX_FOREIGN_HEADER_BYTES ? {} : carried),
      [HEADERS.invalidCode]: code,
      [HEADERS.invalidReason]: `${code}: ${detail}`.slice(0, 1000),
      [HEADERS.invalidAt]: this.deps.now().toISOString(),
      [HEADERS.originalRoutingKey]: message.fields.routingKey,
      ...(intake?.endpointId !== undefined ? { [HEADERS.endpointId]: intake.endpointId } : {}),
    }, 'unknown', span, settle);
    if (!moved) return;
    this.count('invalid', 'invalid', 'unknown');
    this.deps.logger.warn('message parked as invalid', { code, reason: detail.slice(0, 200), ...spanLogFields(span) });
  }

  /**
   * A park that threw: never requeued to `dispatch` (a loop). A fan-out's share goes back to its
   * fan-out, which hands it on; else it is rejected, and the broker dead-letters it to `invalid`.
   */
  unparked(delivery: Delivery, share: boolean, err: unknown, span: Span | undefined): void {
    const error = String((err as Error)?.message ?? err);
    if (!delivery.live) {
      this.deps.logger.warn('delivery channel lost before its park; the broker redelivers it', { error, ...spanLogFields(span) });
      return;
    }
    if (share) return delivery.nack(true);
    this.deps.logger.error('message could not be parked; rejected, the broker dead-letters it to invalid', { error, ...spanLogFields(span) });
    this.count('invalid', 'invalid', 'unknown');
    delivery.nack(false);
  }

  /** The wait written, then the record, then the ack. The write never gives up: while PostgreSQL is down the delivery is held. */
  private async wait(delivery: Delivery, intake: IntakeEvent, reason: WaitPutReason, headers: ScalarHeaders, delayMs: number, record: () => Promise<void>, span: Span | undefined, circuitMs?: number, closesCircuit?: boolean): Promise<void> {
    const waits = this.deps.waits;
    if (!waits) throw new Error('effect: a wait needs the wait writer (a retry schedule needs PostgreSQL)');
    if (this.given(delivery, intake.webhookId, span)) return;
    await publishIn(span, WAITS_TABLE, headers, intake.webhookId, () => waits.put({
      ...waitKeyOf(intake),
      hand: intake.hand ?? 0,
      attempt: typeof headers[HEADERS.attempts] === 'number' ? (headers[HEADERS.attempts] as number) : intake.attempts,
      delayMs, reason, headers: { ...headers, [HEADERS.webhookId]: intake.webhookId },
      content: intake.hand === undefined ? delivery.message.content : undefined,
      spanLeftMs: this.deps.policy.spanLeftMs(intake.resentAt ?? intake.firstSeenAt, this.deps.now()),
      circuitMs,
      ...(circuitMs !== undefined && intake.probe ? { probe: true } : {}),
      // A hand-back's only: a first attempt's would make each batch of a merchant that refuses all a transaction.
      ...(closesCircuit && intake.hand !== undefined ? { closesCircuit } : {}),
    }));
    await record();
    if (delivery.live) delivery.ack();
  }

  /**
   * A hand-back's attempt ended: its wait goes (if still this hand's); `closes` ends the endpoint's
   * circuit. An ordered webhook releases the next of its reference first: a crash between leaves the
   * wait to hand it back. An end PostgreSQL refuses leaves the outcome as it is (WAIT_TAKE_LIMIT bounds it).
   */
  private async endWait(delivery: Delivery, intake: Pick<IntakeEvent, 'merchantId' | 'webhookId' | 'endpointId' | 'ordered' | 'hand' | 'movedBack'>, closes: 'answered' | 'unanswered' | undefined, span: Span | undefined): Promise<void> {
    const place = intake.ordered === true && this.deps.order !== undefined;
    const waits = intake.hand !== undefined || intake.movedBack ? this.deps.waits : undefined;
    if ((!place && !waits) || this.given(delivery, intake.webhookId, span)) return;
    // A place PostgreSQL refuses to end keeps its wait: handed back, it is parked after WAIT_TAKE_LIMIT takes.
    if (place && !(await this.endPlace(waitKeyOf(intake)))) return;
    const circuit = closes === undefined || intake.hand === undefined ? {} : { closesCircuit: true, ...(closes === 'unanswered' ? { unanswered: true } : {}) };
    if (waits) await endWaitOrLog(waits, { ...waitKeyOf(intake), hand: intake.hand ?? 0, ...circuit }, this.deps.logger);
  }

  /**
   * Its channel gone, the broker gives the copy again, and that copy owns its wait and its place (its
   * take, or its step, finds them): it writes or ends them. Ended here, the next of its reference
   * could go before the copy given again, already admitted as head.
   */
  private given(delivery: Delivery, webhookId: string | undefined, span: Span | undefined): boolean {
    if (delivery.live) return false;
    this.deps.logger.warn('delivery channel lost before its wait or end was written; the broker gives it again, and that copy writes it', { webhookId, ...spanLogFields(span) });
    return true;
  }

  /** An end PostgreSQL refuses is logged and left, as a wait's is (the outcome stands); false then. */
  private async endPlace(place: OrderEnd): Promise<boolean> {
    try {
      await this.deps.order!.end(place);
      return true;
    } catch (err) {
      if (!(err instanceof WriteRefusedError)) throw err;
      this.deps.logger.error('place in order not ended: PostgreSQL refused it; the next webhooks of its reference wait', { merchantId: place.merchantId, webhookId: place.webhookId, error: err.message });
      return false;
    }
  }

  /** The one move (libs/broker moveMessage); `settle` runs after the confirm, before the ack. True when moved. */
  private async move(delivery: Delivery, queue: string, base: ScalarHeaders, event: string, span: Span | undefined, settle?: () => Promise<void>): Promise<boolean> {
    const { message } = delivery;
    const webhookId = typeof base[HEADERS.webhookId] === 'string' ? (base[HEADERS.webhookId] as string) : undefined;
    const held: HeldMessage = {
      content: message.content,
      properties: message.properties,
      get live() {
        return delivery.live;
      },
      ack: () => delivery.ack(),
      nack: (requeue) => delivery.nack(requeue),
    };
    const result = await publishIn(span, queue, base, webhookId ?? '', () => moveMessage(this.deps.broker, held, queue, {
      backoffMs: this.deps.moveBackoffMs,
      webhookId,
      headers: () => base,
      afterPublish: settle,
      givingUp: this.deps.stopping,
      onRetry: (err, retry, giveUp) =>
        this.deps.logger.error(giveUp ? 'message could not be moved; returned to its queue' : 'message could not be moved; retrying', { queue, error: err.message, retry, ...spanLogFields(span) }),
    }));
    if (result === 'channel-lost') this.deps.logger.warn('delivery channel lost before its move; the broker redelivers it', { queue, ...spanLogFields(span) });
    if (result === 'requeued') this.count('requeued', 'requeued', event);
    return result === 'moved';
  }
}

/** The key of a webhook's wait (and place in its reference's order): per endpoint ('' for a copy from before endpoints). */
export function waitKeyOf(intake: Pick<IntakeEvent, 'merchantId' | 'webhookId' | 'endpointId'>): { merchantId: string; webhookId: string; endpointId: string } {
  return { merchantId: intake.merchantId, webhookId: intake.webhookId, endpointId: intake.endpointId ?? '' };
}

/** An end PostgreSQL refuses is logged and left: the wait's takes bound its hand-backs (WAIT_TAKE_LIMIT). */
export function endWaitOrLog(waits: WaitWriter, end: WaitEnd, logger: Logger): Promise<void> {
  return waits.end(end).catch((err: unknown) => {
    if (!(err instanceof WriteRefusedError)) throw err;
    logger.error('wait not ended: PostgreSQL refused it; handed back again, it is parked after WAIT_TAKE_LIMIT takes', { merchantId: end.merchantId, webhookId: end.webhookId, error: err.message });
  });
}

/** A webhook's fields for a log line, built only where one is written. */
function logFields(intake: IntakeEvent) {
  return { merchantId: intake.merchantId, endpointId: intake.endpointId, event: intake.event, reference: intake.references[0], webhookId: intake.webhookId };
}
