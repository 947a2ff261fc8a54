import { PLATFORM_MERCHANT_ID } from '../../libs/contracts/index.js';
import type { Logger } from '../../libs/logger/index.js';
import { BoundedMap } from '../../libs/runtime/index.js';
import { type Endpoint, MAX_ENDPOINTS_PER_MERCHANT, type Merchant, type MerchantDirectory, type PgMerchantDirectory } from '../../libs/merchants/index.js';
import type { OperationalMetrics } from '../../libs/metrics/index.js';
import {
  attemptEvent, type AttemptFacts, clockState, disabledEvent, FAILING_ATTEMPT, type IdentifiedEvent, IntervalFolder,
  type OperationalPublisher, shouldRecordFailing,
} from '../../libs/operational/index.js';
import { endpointFor } from './stages/admission.js';
import type { Decision } from './stages/decide.js';
import type { IntakeEvent } from './stages/intake.js';

export interface OperationsDeps {
  merchants: MerchantDirectory;
  /** Where the failing clock and auto-disable are written (none: nothing is). */
  writer?: PgMerchantDirectory;
  publisher: OperationalPublisher;
  logger: Logger;
  metrics?: OperationalMetrics;
}

export interface OperationsSettings {
  /** ENDPOINT_DISABLE_AFTER (0: never). */
  disableAfterMs: number;
  intervalMs: number;
}

/**
 * This dispatcher's own run of failures on one endpoint, by its monotonic clock; `sharedSeen`: the
 * clock the directory showed; `nextAt`: when to tell PostgreSQL again.
 */
interface Streak {
  since: number;
  lastAt: number;
  sharedSeen?: string;
  nextAt?: number;
}

/** An endpoint's last success seen here (monotonic), and the clock it was told to end. */
interface Success {
  url: string;
  at: number;
  told?: string;
}

/** Endpoints whose last success (or run of failures) this dispatcher remembers, at most. */
const MAX_REMEMBERED = 20_000;

/**
 * After each settled delivery: its operational events, folded per endpoint and kind to one per
 * OPERATIONAL_EVENT_INTERVAL; and the endpoint's health for auto-disable, decided in PostgreSQL by
 * its clock alone: a dispatcher tells it durations (a run of failures, a success's age), never a
 * time of its own clock, whose order with another host's means nothing:
 * - one that has seen only failures for a tenth of ENDPOINT_DISABLE_AFTER starts the failing clock
 *   where none runs, and one failing where a clock runs refreshes it, at most once a tenth or when
 *   PostgreSQL says it is due;
 * - any that sees a success ends a clock that started before it;
 * - one told the clock is due disables the endpoint on the locked row: the first alone publishes endpoint.disabled.
 */
export class Operations {
  private readonly folder: IntervalFolder<IdentifiedEvent>;
  private readonly streaks = new BoundedMap<string, Streak>(MAX_REMEMBERED);
  /** Merchant → endpoint id → that endpoint's last success seen here. */
  private readonly lastSuccess = new BoundedMap<string, Map<string, Success>>(MAX_REMEMBERED);
  private readonly writing = new Set<string>();
  private readonly inFlight = new Set<Promise<void>>();
  private readonly health: boolean;

  constructor(private readonly deps: OperationsDeps, private readonly settings: OperationsSettings) {
    this.folder = new IntervalFolder(settings.intervalMs, (item, suppressed) => {
      item.event.data.suppressed = suppressed;
      deps.publisher.emit(item);
    });
    this.health = deps.writer !== undefined && settings.disableAfterMs > 0;
  }

  /** The dashboard's gauges: enabled webhooks whose failing clock runs (not stale), and those off by reason. */
  static census(merchants: Iterable<Merchant>, now: number, disableAfterMs: number): { failing: number; disabled: Record<'failing' | 'manual', number> } {
    const counts = { failing: 0, disabled: { failing: 0, manual: 0 } };
    for (const merchant of merchants) {
      for (const webhook of merchant.endpoints) {
        if (!webhook.enabled) counts.disabled[webhook.disabledReason ?? 'manual']++;
        else if (webhook.failingSince && (disableAfterMs === 0 || clockOf(webhook, now, disableAfterMs) !== 'stale')) counts.failing++;
      }
    }
    return counts;
  }

  /** Never throws and never waits. The platform's own endpoint makes no event (a loop) and is never disabled. */
  observe(intake: IntakeEvent | undefined, decision: Decision, now: Date): void {
    if (!intake || intake.merchantId === PLATFORM_MERCHANT_ID) return;
    try {
      switch (decision.kind) {
        case 'delivered':
          if (decision.attempt > FAILING_ATTEMPT) this.fold('message.attempt.recovered', { ...this.facts(intake, decision.attempt, decision.status), lastError: undefined }, now);
          if (this.health) this.succeeded(intake);
          return;
        case 'retry':
          if (decision.attempt === FAILING_ATTEMPT) this.fold('message.attempt.failing', this.facts(intake, decision.attempt, decision.status, decision.error), now);
          if (this.health) this.failed(intake, now, decision.attempt, decision.status, decision.error);
          return;
        case 'postpone':
          if (this.health) this.failed(intake, now);
          return;
        case 'failed': {
          const facts = this.facts(intake, decision.attempts, decision.status, decision.error);
          if (decision.attempted && decision.attempts === FAILING_ATTEMPT) this.fold('message.attempt.failing', facts, now);
          this.fold('message.attempt.exhausted', { ...facts, reason: decision.reason }, now);
          if (this.health && decision.attempted) this.failed(intake, now, decision.attempts, decision.status, decision.error);
          return;
        }
      }
    } catch (err) {
      this.deps.logger.error('operational events: unexpected error', { merchantId: intake.merchantId, error: (err as Error)?.message });
    }
  }

  /** Sends what is folded and waits for directory writes in flight. */
  async stop(): Promise<void> {
    this.folder.flush();
    await Promise.allSettled([...this.inFlight]);
  }

  private facts(intake: IntakeEvent, attempts: number, status?: number, error?: string): AttemptFacts {
    const endpoint = endpointFor(this.deps.merchants.byId(intake.merchantId), intake);
    const { merchantId, webhookId, event, references } = intake;
    // Deleted mid-retry, it is still the one the webhook was for: its URL went with it.
    const where = { endpointId: endpoint?.id ?? intake.endpointId ?? '', url: endpoint?.url ?? '' };
    const last = { attempts, lastHttpStatus: status ?? intake.lastStatus, lastError: error ?? intake.lastError };
    return { merchantId, ...where, webhookId, event, references, ...last };
  }

  private fold(type: 'message.attempt.failing' | 'message.attempt.exhausted' | 'message.attempt.recovered', facts: AttemptFacts, now: Date): void {
    this.folder.offer(`${type}\n${facts.merchantId}\n${facts.url}`, attemptEvent(type, facts, now));
  }

  /** On every delivered webhook: no string key made per delivery. */
  private succeeded(intake: IntakeEvent): void {
    const { merchantId } = intake;
    const webhook = endpointFor(this.deps.merchants.byId(intake.merchantId), intake);
    if (!webhook) return;
    const at = performance.now();
    let endpoints = this.lastSuccess.get(merchantId);
    if (!endpoints) this.lastSuccess.set(merchantId, (endpoints = new Map()));
    let last = endpoints.get(webhook.id);
    if (last) {
      last.url = webhook.url;
      last.at = at;
      last.told = undefined;
    } else {
      // Deleted endpoints are forgotten, or a merchant whose endpoints churn grows this without bound.
      if (endpoints.size >= MAX_ENDPOINTS_PER_MERCHANT) {
        const live = new Set(this.deps.merchants.byId(merchantId)?.endpoints.map((endpoint) => endpoint.id));
        for (const id of endpoints.keys()) if (!live.has(id)) endpoints.delete(id);
      }
      endpoints.set(webhook.id, (last = { url: webhook.url, at }));
    }
    if (this.streaks.size > 0) this.streaks.delete(`${merchantId}\n${webhook.url}`);
    if (webhook.failingSince) this.tellSuccess(merchantId, webhook, last);
  }

  /**
   * PostgreSQL ends the clock if it started before the success. Told once per clock, once PostgreSQL
   * answered (else again on the next failure); a newer success meanwhile is told on its own.
   */
  private tellSuccess(merchantId: string, webhook: Endpoint, success: Success): void {
    const { at } = success;
    const clock = webhook.failingSince;
    this.background(merchantId, webhook.url, 'clear failing clock', async (writer) => {
      await writer.recordHealth(merchantId, webhook.url, { kind: 'succeeded', agoMs: performance.now() - at });
      if (success.at === at) success.told = clock;
    });
  }

  private failed(intake: IntakeEvent, now: Date, attempts?: number, status?: number, error?: string): void {
    const webhook = endpointFor(this.deps.merchants.byId(intake.merchantId), intake);
    if (!webhook?.enabled) return;
    const key = `${intake.merchantId}\n${webhook.url}`;
    // Monotonic: a step of the host's clock must not lengthen a run of failures.
    const at = performance.now();
    const after = this.settings.disableAfterMs;
    // PostgreSQL's stamp: compared with nothing of this host's, only told apart.
    const shared = webhook.failingSince;
    // A success seen here, and a clock since (another dispatcher started it meanwhile): PostgreSQL orders them.
    const success = this.lastSuccess.get(intake.merchantId)?.get(webhook.id);
    if (shared !== undefined && success && success.url === webhook.url && success.told !== shared) {
      this.tellSuccess(intake.merchantId, webhook, success);
      return;
    }
    let streak = this.streaks.get(key);
    // Failures before a success elsewhere (the clock cleared) or before a long silence do not count.
    if (streak && ((streak.sharedSeen !== undefined && shared === undefined) || at - streak.lastAt > after / 5)) streak = undefined;
    if (!streak) this.streaks.set(key, (streak = { since: at, lastAt: at }));
    streak.sharedSeen = shared;
    streak.lastAt = at;
    // Told first once its own failures span a tenth, or at once where a clock runs; then when PostgreSQL said.
    if (streak.nextAt === undefined ? shared === undefined && !shouldRecordFailing(streak.since, at, after) : at < streak.nextAt) return;
    const run = streak;
    const last = {
      attempts: attempts ?? intake.attempts, lastHttpStatus: status ?? intake.lastStatus, lastError: error ?? intake.lastError,
    };
    this.background(intake.merchantId, webhook.url, 'record failing clock', async (writer) => {
      const written = await writer.recordHealth(intake.merchantId, webhook.url, { kind: 'failing', streakMs: at - run.since, afterMs: after });
      const clock = written?.clock;
      if (!written || !clock) {
        // No clock runs and this run is under a tenth: told again once it spans one.
        run.nextAt = run.since + after / 10;
        return;
      }
      const state = clockOf(clock, written.now.getTime(), after);
      const dueInMs = Date.parse(clock.failingSince) + after - written.now.getTime();
      run.nextAt = at + Math.max(0, Math.min(dueInMs, after / 10));
      if (state === 'due') await this.disable(writer, intake, webhook.url, now, last);
    });
  }

  /** Turns the endpoint off if its clock is due by PostgreSQL's time, read under the merchant's lock. */
  private async disable(writer: PgMerchantDirectory, intake: IntakeEvent, url: string, now: Date, last: { attempts: number; lastHttpStatus?: number; lastError?: string }): Promise<void> {
    let failingSince: string | undefined;
    let disabledAt = '';
    let endpointId = '';
    const change = (current: Merchant | undefined, at: Date) => {
      const webhook = current?.endpoints.find((endpoint) => endpoint.url === url);
      if (!current || !webhook?.enabled || webhook.url !== url || !webhook.failingSince) return undefined;
      if (clockOf(webhook, at.getTime(), this.settings.disableAfterMs) !== 'due') return undefined;
      failingSince = webhook.failingSince;
      endpointId = webhook.id;
      disabledAt = at.toISOString();
      return { ...current, endpoints: current.endpoints.map((endpoint) => (endpoint === webhook ? { ...webhook, enabled: false, disabledReason: 'failing' as const, disabledAt } : endpoint)) };
    };
    // Only the write that changed the row publishes.
    if (!(await writer.update(intake.merchantId, change)).changed) return;
    this.deps.metrics?.disabled('failing');
    this.deps.logger.warn('endpoint disabled: every attempt failed for ENDPOINT_DISABLE_AFTER', { merchantId: intake.merchantId, endpointId, failingSince, disabledAt });
    const { merchantId, webhookId, event, references } = intake;
    const facts = { merchantId, endpointId, url, reason: 'failing' as const, disabledAt, failingSince, webhookId, event, references, ...last };
    this.deps.publisher.emit(disabledEvent(facts, now));
  }

  /** One write per endpoint at a time, in the background: none while one is under way. */
  private background(merchantId: string, url: string, what: string, work: (writer: PgMerchantDirectory) => Promise<unknown>): void {
    const key = `${merchantId}\n${url}`;
    const writer = this.deps.writer;
    if (!writer || this.writing.has(key)) return;
    this.writing.add(key);
    const running = (async () => {
      try {
        await work(writer);
      } catch (err) {
        // A merchant removed meanwhile, or the database away: the next delivery tries again.
        this.deps.logger.warn('endpoint health not written; tried again on the next delivery', { merchantId, what, error: (err as Error).message });
      } finally {
        this.writing.delete(key);
      }
    })();
    this.inFlight.add(running);
    void running.then(() => this.inFlight.delete(running));
  }
}

/** clockState from the stamps PostgreSQL wrote; one absent counts as none. */
function clockOf(clock: { failingSince?: string; lastFailureAt?: string }, now: number, afterMs: number): ReturnType<typeof clockState> {
  return clockState(Date.parse(clock.failingSince ?? ''), Date.parse(clock.lastFailureAt ?? ''), now, afterMs);
}
