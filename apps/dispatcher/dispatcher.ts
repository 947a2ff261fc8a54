import type { ConsumeMessage } from 'amqplib';
import type { DeliveryRecorder, DeliveryRecordInput } from '../../libs/delivery-log/index.js';
import type { BrokerConnection, Consumer, Delivery } from '../../libs/broker/index.js';
import type { WebhookHttpClient } from '../../libs/http/index.js';
import type { Logger } from '../../libs/logger/index.js';
import { type DeliveryObserver, noopObserver } from '../../libs/metrics/index.js';
import { legacyEndpointId, type Merchant, type MerchantDirectory } from '../../libs/merchants/index.js';
import { RetryPolicy } from '../../libs/retry-policy/index.js';
import { WebhookSigner } from '../../libs/signing/index.js';
import type { FailedStore } from '../../libs/failed/index.js';
import type { IntakeChecker } from '../../libs/intake-keys/index.js';
import { StartOnce, within } from '../../libs/runtime/index.js';
import type { WaitStore, WaitWriter } from '../../libs/waits/index.js';
import type { OrderGate, OrderState, OrderTurn } from '../../libs/ordering/index.js';
import { type TopologyNames, topologyNames } from '../../libs/topology/index.js';
import { InvalidMessageError } from './errors.js';
import type { Operations } from './operations.js';
import { AdmissionStage, endpointFor } from './stages/admission.js';
import { AttemptStage } from './stages/attempt.js';
import { decide, type Finding } from './stages/decide.js';
import { EffectStage, WAITS_TABLE, waitKeyOf } from './stages/effect.js';
import { ANSWERS_KEPT, EndpointGuards } from './stages/endpoint-guards.js';
import { fanOut, route } from './stages/fan-out.js';
import { HandBackTakes } from './stages/hand-backs.js';
import { type HandBack, handBackOf, type IntakeEvent, intakeDigestOf, keyCheckOf, parseIntake } from './stages/intake.js';
import { endOrphanedPlaces, type OrphanedPlacesDeps, parkedPlaces, walkedBefore } from './stages/orphaned-places.js';
import { recordOf } from './stages/record.js';
import type { Throttle } from './stages/throttle.js';
import { injectSpan, markFailed, publishChild, type Span, spanLogFields, tracingActive } from '../../libs/tracing/index.js';
import { deliverySpan, describeDelivery, describeFanOut } from './stages/trace.js';

/** After a record the deliveries stream did not confirm, how long records are not waited for. */
export const RECORDS_DOWN_MS = 15_000;

/** Prefetch per request slot: a delivery keeps its prefetch slot after its request, until its record is confirmed and its ack sent. */
export const PREFETCH_PER_SLOT = 2;

/** A hand-back that waited longer than this for its slot is taken again before its attempt (its lease runs from the take). */
const RETAKE_AFTER_MS = 500;

/**
 * An endpoint's circuit: opened by this many failed attempts in a row when at least half of its last
 * `window` answers failed too, open this long, doubling while its probes fail, up to the most.
 */
export const BREAKER = { threshold: 5, window: ANSWERS_KEPT, cooldownMs: 30_000, maxCooldownMs: 600_000 };

export interface DispatcherSettings {
  prefix: string;
  retryDelaysMs: readonly number[];
  deliveryTimeoutMs: number;
  /** DISPATCH_CONCURRENCY. */
  concurrency: number;
  maxMessageBytes: number;
  userAgent: string;
  /** How long stop() waits for in-flight deliveries (they return to the queue). */
  drainTimeoutMs?: number;
  /** Per endpoint URL; default half of concurrency (the bound for all of an endpoint's URLs). */
  perEndpointConcurrency?: number;
  /** Default BREAKER. */
  breakerThreshold?: number;
  breakerCooldownMs?: number;
  maxDeferrals?: number;
  /** Waits between tries of a move the broker did not take, before the delivery goes back to its queue. */
  moveBackoffMs?: readonly number[];
  /** WAIT_LEASE. */
  waitLeaseMs?: number;
}

export interface DispatcherDeps {
  broker: BrokerConnection;
  merchants: MerchantDirectory;
  http: WebhookHttpClient;
  logger: Logger;
  now?: () => Date;
  observer?: DeliveryObserver;
  /** Required with a retry schedule. */
  waits?: { writer: WaitWriter; store: WaitStore };
  order?: OrderGate;
  throttle?: Throttle;
  deliveryLog?: DeliveryRecorder;
  operations?: Operations;
  /** The failure index (best effort; the recorder writes it too). */
  failures?: FailedStore;
  /** The platform's endpoint (platformEndpoint()); without it operational events are skipped. */
  platform?: Merchant;
  intakeKeys?: IntakeChecker;
}

/**
 * Consumes `dispatch` and walks each delivery through its stages in handle(): intake → admission →
 * attempt → decision → effect. Only the effect acks, once the outcome is safe. A new event for
 * several endpoints is walked once per endpoint (stages/fan-out.ts), acked once all are done.
 */
export class Dispatcher {
  readonly guards: EndpointGuards;
  private readonly names: TopologyNames;
  private readonly policy: RetryPolicy;
  private readonly now: () => Date;
  readonly admission: AdmissionStage;
  private readonly attempt: AttemptStage;
  private readonly effect: EffectStage;
  private readonly takes?: HandBackTakes;
  private readonly orphanDeps: OrphanedPlacesDeps;
  private consumer?: Consumer;
  /** Deliveries settled without their delivery-log record. */
  recordsLost = 0;
  private recordsDownUntil = 0;
  private readonly inFlight = new Set<Promise<void>>();
  private readonly starting = new StartOnce();
  private stopping?: Promise<void>;

  constructor(private readonly deps: DispatcherDeps, private readonly settings: DispatcherSettings) {
    this.names = topologyNames(settings.prefix);
    this.orphanDeps = { order: deps.order, merchants: deps.merchants, logger: deps.logger, events: this.names.events };
    this.now = deps.now ?? (() => new Date());
    this.policy = new RetryPolicy({ delaysMs: settings.retryDelaysMs, maxDeferrals: settings.maxDeferrals });
    if (settings.retryDelaysMs.length > 0 && !deps.waits) throw new Error('a retry schedule needs waits in PostgreSQL (deps.waits)');
    const observer = deps.observer ?? noopObserver;
    if (deps.waits) this.takes = new HandBackTakes(deps.waits, Math.max(settings.waitLeaseMs ?? 60_000, 2 * settings.deliveryTimeoutMs), deps.logger, () => this.stopping !== undefined);
    const half = Math.max(1, Math.ceil(settings.concurrency / 2));
    const cooldownMs = settings.breakerCooldownMs ?? BREAKER.cooldownMs;
    this.guards = new EndpointGuards({
      maxInFlight: settings.perEndpointConcurrency ?? half, maxTotalInFlight: settings.concurrency, maxPerMerchant: half,
      failureThreshold: settings.breakerThreshold ?? BREAKER.threshold, failureWindow: BREAKER.window,
      cooldownMs, maxCooldownMs: Math.max(cooldownMs, BREAKER.maxCooldownMs),
    });
    this.admission = new AdmissionStage(deps.merchants, this.guards, this.policy, deps.platform, deps.throttle);
    this.attempt = new AttemptStage(deps.http, new WebhookSigner(), observer, settings, deps.merchants);
    this.effect = new EffectStage({
      broker: deps.broker, names: this.names, policy: this.policy, logger: deps.logger, observer, failures: deps.failures,
      waits: deps.waits?.writer, order: deps.order, now: this.now, stopping: () => this.stopping !== undefined,
      moveBackoffMs: settings.moveBackoffMs ?? [500, 1_000, 2_000, 4_000, 8_000],
    });
  }

  get unacked(): number {
    return this.inFlight.size;
  }

  get stats(): EffectStage['stats'] {
    return this.effect.stats;
  }

  /** Consumes dispatch; safe twice (a second call is the first's), and a no-op once stopped. */
  start(): Promise<void> {
    return this.starting.run(() => this.consume());
  }

  private async consume(): Promise<void> {
    if (this.stopping) return;
    this.consumer = await this.deps.broker.consume(this.names.dispatch, {
      prefetch: PREFETCH_PER_SLOT * this.settings.concurrency,
      onMessage: (delivery) => this.track(this.handle(delivery, tracingActive() ? deliverySpan(delivery.message, this.names.dispatch) : undefined)),
    });
    this.deps.logger.info('dispatcher consuming', { queue: this.names.dispatch, concurrency: this.settings.concurrency, retries: this.settings.retryDelaysMs.length });
  }

  /** Stops taking deliveries and waits for those in flight; safe twice. */
  stop(): Promise<void> {
    this.stopping ??= (async () => {
      // A start under way ends first: its consumer is cancelled.
      await this.starting.settled();
      await this.consumer?.cancel();
      this.guards.wakeAll();
      const drained = await within(this.settings.drainTimeoutMs ?? 30_000, Promise.allSettled([...this.inFlight]));
      if (drained === undefined) this.deps.logger.warn('dispatcher stopped with deliveries in flight; the broker requeues them', { inFlight: this.inFlight.size });
    })();
    return this.stopping;
  }

  /** One delivery through its stages, or (`share`, `shareTurn`) a fan-out's share. Never rejects: an unexpected error parks it. */
  private async handle(delivery: Delivery, span?: Span, share?: IntakeEvent, shareTurn?: OrderTurn): Promise<void> {
    // For an unexpected error's park.
    let parsed = share;
    let turn = shareTurn;
    try {
      const now = this.now();
      const { message } = delivery;
      let intake = share;
      let finding: Finding | undefined;
      if (!intake) {
        try {
          intake = parsed = parseIntake(message, this.settings.maxMessageBytes, now, this.names.events, this.names.dispatch);
          // Before the walk's first await: places are asked in the order consumed.
          turn = this.turnOf(intake);
        } catch (err) {
          if (!(err instanceof InvalidMessageError)) throw err;
          finding = await this.invalid(message, err);
          // A copy that took places before it could no longer be read: they end with its park.
          if (finding.kind === 'invalid' && !finding.handTaken) {
            const places = await parkedPlaces(delivery, this.orphanDeps);
            // Its channel gone: the broker gives it again.
            if (!places) return;
            finding.places = places;
          }
        }
      }
      // Before any write: a deleted merchant's stays deleted. Not again for a share (its original was looked at).
      if (intake && !share && (await this.erasedNow(intake))) finding = { kind: 'erased', merchantId: intake.merchantId, webhookId: intake.webhookId };
      if (!share && intake && !finding) {
        finding = await this.firstSight(message, intake);
        // Its channel gone: the broker gives it again.
        if (!(await endOrphanedPlaces(delivery, intake, finding, this.orphanDeps))) return;
        if (finding?.kind === 'fan-out') return await this.fanOut(delivery, intake, finding.endpointIds, span, turn);
        if (finding?.kind === 'duplicate') intake = undefined;
      }
      if (!finding) ({ intake, finding } = await this.onward(message, intake!, now, span, () => delivery.live, turn));
      // Past its place in order, or asks none: the next of its reference asks.
      turn?.pass();
      // Deleted meanwhile: its outcome writes nothing.
      if (intake && finding.kind !== 'superseded' && this.erased(intake)) finding = { kind: 'erased', merchantId: intake.merchantId, webhookId: intake.webhookId };
      const decision = decide(finding, intake, this.policy, now);
      // A repeat or a stale copy has no intake past here, but its span names its webhook.
      if (span && !share) describeDelivery(span, intake ?? parsed, decision);
      // Recorded after its effect, before the ack: a crash cannot leave it out, a move that gives up records nothing.
      const record = this.deps.deliveryLog && recordOf(intake, finding, decision, this.policy, now);
      const settle = record
        ? async () => {
            // Ended here, not in publishIn's callbacks: fewer allocations per delivery.
            const recording = span && publishChild(span, this.names.deliveries);
            await this.record(record, span);
            recording?.end();
          }
        : undefined;
      await this.effect.apply(delivery, intake, decision, now, span, settle);
      this.deps.operations?.observe(intake, decision, now);
    } catch (err) {
      await this.onUnexpected(delivery, err, span, parsed, share !== undefined);
    } finally {
      turn?.pass();
      if (!share) span?.end();
    }
  }

  /** Which endpoints a new message is for ('fan-out', or none: why), and whether it is a repeat; undefined: its one endpoint. */
  private async firstSight(message: ConsumeMessage, intake: IntakeEvent): Promise<Finding | undefined> {
    const checked = keyCheckOf(message, intake, this.names.events);
    const routed = route(intake, this.deps.merchants);
    // An unknown merchant's message is parked without its key: taken, it would drop upstream's publish once the merchant existed.
    if (!this.deps.intakeKeys || !checked || (routed?.kind === 'unavailable' && routed.why === 'merchant-removed')) return routed;
    const key = { merchantId: intake.merchantId, webhookId: intake.webhookId };
    const sight = await this.deps.intakeKeys.check({ ...key, digest: intakeDigestOf(message) }, checked.redelivered);
    if (sight !== 'repeat' && sight !== 'changed' && sight !== 'carried') return routed;
    const endpointIds = routed?.kind === 'fan-out' ? routed.endpointIds : intake.endpointId !== undefined ? [intake.endpointId] : [];
    // A changed body is upstream's repeat, never the first copy's redelivery: no endpoint gets it.
    if (checked.redelivered && sight === 'repeat' && endpointIds.length > 0) {
      // A dispatcher that died mid-fan-out settled some endpoints: those without a record get it. None left: a repeat.
      const left = await this.deps.intakeKeys.unrecorded(key, endpointIds, legacyEndpointId(intake.merchantId));
      if (left.length > 0) {
        if (routed?.kind === 'fan-out') routed.endpointIds = left;
        return routed;
      }
    }
    this.deps.intakeKeys.dropped(key);
    return { kind: 'duplicate', ...key, changed: sight === 'changed' };
  }

  private async fanOut(delivery: Delivery, intake: IntakeEvent, endpointIds: readonly string[], span: Span | undefined, turn: OrderTurn | undefined): Promise<void> {
    if (span) describeFanOut(span, intake, endpointIds.length);
    this.effect.stats.fannedOut++;
    // Each share asks in the message's turn, which passes once all have.
    const turns = new Map(endpointIds.map((endpointId) => [endpointId, turn?.share()]));
    turn?.pass();
    await fanOut(delivery, intake, endpointIds, (share, own) => this.handle(share, span, own, turns.get(own.endpointId!)), (share, own) => this.effect.handOn(share, own, span));
  }

  /** A hand-back's take, an ordered webhook's place, admission and attempt: each finds what ends the walk or hands on. */
  private async onward(message: ConsumeMessage, intake: IntakeEvent, now: Date, span: Span | undefined, live: () => boolean, turn: OrderTurn | undefined): Promise<{ intake?: IntakeEvent; finding: Finding }> {
    // A wait handed back: only its current hand comes to an attempt.
    const untaken = intake.hand !== undefined ? await this.takes?.take(intake, intake.hand, span, live) : undefined;
    if (untaken) return { intake: untaken.kind === 'superseded' ? undefined : intake, finding: untaken };
    const takenAt = performance.now();
    const place = await this.placeInOrder(message, intake, span, turn);
    // The next of its reference asks now, not after this attempt.
    turn?.pass();
    if (place === 'waiting') return { intake, finding: { kind: 'ordered' } };
    // A copy of one already done, unless moved back from invalid: that goes outside the order, like a resend.
    if (place === 'ended' && !intake.movedBack) return { finding: { kind: 'superseded', key: `${intake.webhookId}#ended` } };
    if (intake.resendClaim !== undefined && intake.attempts === 0 && intake.deferrals === 0 && intake.postponements === 0) {
      this.effect.markResent(intake, intake.resendClaim, span);
    }
    // A hand-back that waited for its slot is taken again: its lease may not cover the attempt.
    const { takes } = this;
    const hand = intake.hand;
    const retake = hand === undefined || !takes ? undefined : async () => (performance.now() - takenAt > RETAKE_AFTER_MS ? takes.take(intake, hand, span, live, true) : undefined);
    // Given up like a stop's once its channel is gone: the broker has given it back.
    const admitted = await this.admission.admit(intake, now, () => this.stopping !== undefined || !live(), retake);
    if (admitted.kind === 'stopping') await this.takes?.untake(intake);
    if (admitted.kind !== 'admitted') return { intake: admitted.kind === 'superseded' ? undefined : intake, finding: admitted };
    // Signed with the clock as it is sent: a delivery held unacked is not signed stale.
    const finding = await this.attempt.run(intake, admitted, this.now(), span);
    // Deleted while its request was out: not even its endpoint's adaptive rate is written.
    if (this.erased(intake)) return { finding: { kind: 'erased', merchantId: intake.merchantId, webhookId: intake.webhookId } };
    if (this.deps.throttle) {
      const status = finding.kind === 'sent' ? finding.status : finding.kind === 'attempt-failed' ? finding.error.status : undefined;
      this.deps.throttle.answered(intake.merchantId, admitted.webhook, status, finding.kind === 'sent');
    }
    return { intake, finding };
  }

  /** Whether the webhook's merchant was deleted (the directory's tombstone, memory only). */
  private erased(intake: IntakeEvent): boolean {
    return this.deps.merchants.deleted?.(intake.merchantId) === true;
  }

  /** erased, read again after a poll of the directory when it says so: the merchant may have been made again with the id. */
  private async erasedNow(intake: IntakeEvent): Promise<boolean> {
    if (!this.erased(intake)) return false;
    await this.deps.merchants.poll?.();
    return this.erased(intake);
  }

  /**
   * One not confirmed does not hold the delivery (handed back, it would be POSTed again): counted and
   * logged, and for RECORDS_DOWN_MS records are not waited for, so a stream without a leader holds none.
   */
  private record(record: DeliveryRecordInput, span?: Span): Promise<void> | undefined {
    const written = this.deps.deliveryLog!.record(record);
    if (performance.now() < this.recordsDownUntil) {
      written.catch((err: unknown) => this.recordLost(record, err, span));
      return undefined;
    }
    return written.then(undefined, (err: unknown) => {
      this.recordsDownUntil = performance.now() + RECORDS_DOWN_MS;
      this.recordLost(record, err, span);
    });
  }

  /**
   * A new webhook of an ordered endpoint: `waiting` behind an earlier one (its 'ordered' wait written),
   * `ended` for a copy of one already done, `head` to attempt it; undefined when it is not ordered.
   */
  private async placeInOrder(message: ConsumeMessage, intake: IntakeEvent, span: Span | undefined, turn: OrderTurn | undefined): Promise<OrderState | undefined> {
    const order = this.deps.order;
    if (!order || !turn || intake.orderKey === undefined) return undefined;
    // The endpoint's own setting: each endpoint's deliveries are ordered apart.
    const setting = endpointFor(this.deps.merchants.byId(intake.merchantId), intake)?.orderByReference === true;
    // Off now: a copy that took its place while it was on still ends it, or those behind it wait for ever.
    if (!setting && !(await this.heldPlace(message, intake, order))) return undefined;
    // A copy moved back from invalid ends its key's spent wait first (wait-not-ended), or that row
    // answers 'waiting' and its line stops at it. Refused, it is parked again, not acked.
    if (intake.movedBack) await this.deps.waits?.writer.end({ ...waitKeyOf(intake), hand: 0 });
    // Marked before its admission: the 'ordered' wait written with it carries the mark.
    intake.ordered = true;
    let waitSpan: Span | undefined;
    let place: OrderState;
    try {
      place = await order.admit({ ...waitKeyOf(intake), key: intake.orderKey }, () => {
        const headers = this.effect.waitingHeaders({ message }, intake);
        // A producer span whose context the hand-back carries.
        if (span) injectSpan((waitSpan = publishChild(span, WAITS_TABLE, intake.webhookId)), headers);
        return { headers, content: message.content };
      }, turn);
    } catch (err) {
      if (waitSpan) markFailed(waitSpan, err);
      throw err;
    } finally {
      waitSpan?.end();
    }
    // Only a head ends a place in the order (a waiting one's end is its hand-back's).
    intake.ordered = place === 'head';
    return place;
  }

  /** Its turn to ask for a place in order: only a new webhook of a reference (not a hand-back, a resend's copy, a test event). */
  private turnOf(intake: IntakeEvent): OrderTurn | undefined {
    const order = this.deps.order;
    if (!order || intake.orderKey === undefined || intake.hand !== undefined || intake.resentAt !== undefined || intake.test) return undefined;
    return order.turn(intake.merchantId, intake.orderKey);
  }

  /**
   * Whether a copy of an endpoint not ordered now took a place in its line before: asked only of a
   * copy that may have walked before (a round trip per fresh message costs half the rate). PostgreSQL
   * not answering, it goes unordered: an outage holds no merchant that does not order.
   */
  private async heldPlace(message: ConsumeMessage, intake: IntakeEvent, order: OrderGate): Promise<boolean> {
    if (!walkedBefore(message, this.names.events)) return false;
    try {
      return await order.holds(waitKeyOf(intake));
    } catch (err) {
      this.deps.logger.warn('place in order not looked up: PostgreSQL did not answer; sent outside the order', { merchantId: intake.merchantId, webhookId: intake.webhookId, error: (err as Error)?.message });
      return false;
    }
  }

  /** A message that failed intake is parked (a hand-back's current hand ends its wait with it); a stale hand-back is dropped. */
  private async invalid(message: ConsumeMessage, err: InvalidMessageError): Promise<Finding> {
    const handBack = handBackOf(message, this.names.events);
    const taken = handBack && (await this.takes?.current(handBack));
    if (taken === false) return { kind: 'superseded', key: `${handBack!.webhookId}#${handBack!.hand}` };
    return { kind: 'invalid', code: err.code, detail: err.detail, handTaken: taken ? handBack : undefined };
  }

  /** A hand-back about to be parked, if its hand is still current (taken again: the error may have come before its take). */
  private async currentHandBack(message: ConsumeMessage, intake?: IntakeEvent): Promise<HandBack | undefined> {
    const handBack = intake ? (intake.hand === undefined ? undefined : { ...intake, hand: intake.hand }) : handBackOf(message, this.names.events);
    return handBack && (await this.takes?.current(handBack)) ? handBack : undefined;
  }

  private recordLost(record: DeliveryRecordInput, err: unknown, span: Span | undefined): void {
    this.recordsLost++;
    const { merchantId, webhookId, outcome } = record;
    const fields = { merchantId, webhookId, outcome, error: (err as Error)?.message, ...spanLogFields(span) };
    this.deps.logger.error('delivery record not written; the delivery goes on without it', fields);
  }

  private track(work: Promise<void>): void {
    this.inFlight.add(work);
    const done = () => void this.inFlight.delete(work);
    void work.then(done, done);
  }

  private async onUnexpected(delivery: Delivery, err: unknown, span: Span | undefined, intake: IntakeEvent | undefined, share: boolean): Promise<void> {
    this.deps.logger.error('unexpected error handling a message', { error: (err as Error)?.message, ...spanLogFields(span) });
    try {
      const handTaken = await this.currentHandBack(delivery.message, intake);
      // A copy parked before its step here ends the places an earlier walk of it took.
      const places = !handTaken && intake?.hand === undefined && intake?.ordered !== true
        ? await parkedPlaces(delivery, this.orphanDeps, share ? (intake?.endpointId ?? '') : undefined)
        : [];
      // Its channel gone: the broker gives it again.
      if (!places) return;
      await this.effect.apply(delivery, intake, { kind: 'invalid', code: 'internal-error', detail: String((err as Error)?.message ?? err), handTaken, places }, this.now(), span);
    } catch (parkErr) {
      this.effect.unparked(delivery, share, parkErr, span);
    }
  }
}
