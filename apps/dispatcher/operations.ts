import { PLATFORM_MERCHANT_ID } from '../../libs/contracts/index.js';
import type { Logger } from '../../libs/logger/index.js';
import { BoundedMap } from '../../libs/runtime/index.js';
import { type Endpoint, type Health, MAX_ENDPOINTS_PER_MERCHANT, type Merchant, type MerchantDirectory, type PgMerchantDirectory } from '../../libs/merchants/index.js';
import type { OperationalMetrics } from '../../libs/metrics/index.js';
import {
  attemptEvent,
  type AttemptFacts,
  clockState,
  disabledEvent,
  FAILING_ATTEMPT,
  type IdentifiedEvent,
  IntervalFolder,
  type OperationalPublisher,
  shouldRecordFailing,
} from '../../libs/operational/index.js';
import { endpointFor } from './stages/admission.js';
import type { Decision } from './stages/decide.js';
import type { IntakeEvent } from './stages/intake.js';

export interface OperationsDeps {
  merchants: MerchantDirectory;
  /** The database directory (not MERCHANTS_FILE): the failing clock and auto-disable are written through it. */
  writer?: PgMerchantDirectory;
  publisher: OperationalPublisher;
  logger: Logger;
  metrics?: OperationalMetrics;
}

export interface OperationsSettings {
  /** ENDPOINT_DISABLE_AFTER (0: never) and OPERATIONAL_EVENT_INTERVAL. */
  disableAfterMs: number;
  intervalMs: number;
}

/** This dispatcher's own run of failures on one endpoint; `sharedSeen`: the directory's clock, gone after a success elsewhere. */
interface Streak {
  since: number;
  lastAt: number;
  sharedSeen?: number;
}

/** Endpoints whose last success (or run of failures) this dispatcher remembers, at most: past it, the one set longest ago goes. */
const MAX_REMEMBERED = 20_000;

/**
 * After each settled delivery: its operational events (message.attempt.failing, .exhausted,
 * .recovered), folded per endpoint and kind to one per OPERATIONAL_EVENT_INTERVAL; and the
 * endpoint's health for auto-disable, decided through PostgreSQL where every dispatcher sees the same rows:
 * - one that has seen only failures for a tenth of ENDPOINT_DISABLE_AFTER starts the failing clock
 *   in `endpoint_health` where none runs, refreshed at most once a tenth (stale after two tenths
 *   without a failure: clockState); each write only if the clock is still the one it saw, and
 *   none changes the merchant's version (the admin API's ETag);
 * - any that sees a success after `failingSince` clears it, and one that sees it cleared starts over;
 * - one whose attempt fails ENDPOINT_DISABLE_AFTER after `failingSince` disables the endpoint in a
 *   transaction on the locked row that reads the clock: the first writes it and alone publishes
 *   endpoint.disabled; the others find it disabled.
 */
export class Operations {
  private readonly folder: IntervalFolder<IdentifiedEvent>;
  private readonly streaks = new BoundedMap<string, Streak>(MAX_REMEMBERED);
  /** Merchant → endpoint id → that endpoint's last success seen here (the URL, in case it changed since). */
  private readonly lastSuccess = new BoundedMap<string, Map<string, { url: string; at: number }>>(MAX_REMEMBERED);
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
        if (webhook.enabled) {
          if (!webhook.failingSince) continue;
          const last = webhook.lastFailureAt === undefined ? undefined : Date.parse(webhook.lastFailureAt);
          if (disableAfterMs === 0 || clockState(Date.parse(webhook.failingSince), last, now, disableAfterMs) !== 'stale') counts.failing++;
        } else {
          counts.disabled[webhook.disabledReason ?? 'manual']++;
        }
      }
    }
    return counts;
  }

  /**
   * One settled delivery; never throws and never waits. The platform's own endpoint makes no event
   * (it would be sent to the same failing endpoint, and so on) and is never disabled.
   */
  observe(intake: IntakeEvent | undefined, decision: Decision, now: Date): void {
    if (!intake || intake.merchantId === PLATFORM_MERCHANT_ID) return;
    try {
      switch (decision.kind) {
        case 'delivered':
          if (decision.attempt > FAILING_ATTEMPT) this.fold('message.attempt.recovered', this.facts(intake, decision.attempt, decision.status), now);
          if (this.health) this.succeeded(intake, now.getTime());
          return;
        case 'retry':
          if (decision.attempt === FAILING_ATTEMPT) this.fold('message.attempt.failing', this.facts(intake, decision.attempt, decision.status, decision.error), now);
          if (this.health) this.failed(intake, now, decision.attempt, decision.status, decision.error);
          return;
        case 'postpone':
          // The circuit is open: the endpoint's last attempts failed and its probes still do.
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

  private endpointOf(intake: IntakeEvent): Endpoint | undefined {
    const merchant = this.deps.merchants.byId(intake.merchantId);
    return merchant && endpointFor(merchant, intake);
  }

  private facts(intake: IntakeEvent, attempts: number, status?: number, error?: string): AttemptFacts {
    const endpoint = this.endpointOf(intake);
    return {
      merchantId: intake.merchantId,
      endpointId: endpoint?.id ?? '',
      url: endpoint?.url ?? '',
      webhookId: intake.webhookId,
      event: intake.event,
      references: intake.references,
      attempts,
      lastHttpStatus: status ?? intake.lastStatus,
      lastError: error ?? intake.lastError,
    };
  }

  private fold(type: 'message.attempt.failing' | 'message.attempt.exhausted' | 'message.attempt.recovered', facts: AttemptFacts, now: Date): void {
    this.folder.offer(`${type}\n${facts.merchantId}\n${facts.url}`, attemptEvent(type, facts, now));
  }

  /** On every delivered webhook: kept to a few lookups and two assignments (no string key made per delivery). */
  private succeeded(intake: IntakeEvent, at: number): void {
    const { merchantId } = intake;
    const webhook = this.endpointOf(intake);
    if (!webhook) return;
    let endpoints = this.lastSuccess.get(merchantId);
    if (!endpoints) this.lastSuccess.set(merchantId, (endpoints = new Map()));
    const last = endpoints.get(webhook.id);
    if (last) {
      last.url = webhook.url;
      last.at = at;
    } else {
      // Deleted endpoints are forgotten: one merchant whose endpoints churn grew this without bound.
      if (endpoints.size >= MAX_ENDPOINTS_PER_MERCHANT) this.forgetDeleted(merchantId, endpoints);
      endpoints.set(webhook.id, { url: webhook.url, at });
    }
    if (this.streaks.size > 0) this.streaks.delete(`${merchantId}\n${webhook.url}`);
    if (webhook.failingSince && Date.parse(webhook.failingSince) < at) this.clearFailing(merchantId, webhook.url, webhook);
  }

  /** Forgets the successes of the merchant's endpoints that are no longer in the directory. */
  private forgetDeleted(merchantId: string, endpoints: Map<string, unknown>): void {
    const live = new Set(this.deps.merchants.byId(merchantId)?.endpoints.map((endpoint) => endpoint.id));
    for (const id of endpoints.keys()) if (!live.has(id)) endpoints.delete(id);
  }

  private successAt(merchantId: string, endpointId: string, url: string): number {
    const last = this.lastSuccess.get(merchantId)?.get(endpointId);
    return last && last.url === url ? last.at : -Infinity;
  }

  private failed(intake: IntakeEvent, now: Date, attempts?: number, status?: number, error?: string): void {
    const webhook = this.endpointOf(intake);
    if (!webhook?.enabled) return;
    const key = `${intake.merchantId}\n${webhook.url}`;
    const at = now.getTime();
    const after = this.settings.disableAfterMs;
    const shared = webhook.failingSince === undefined ? undefined : Date.parse(webhook.failingSince);
    // A success seen here after the shared clock started (another dispatcher started it meanwhile).
    const succeededAt = this.successAt(intake.merchantId, webhook.id, webhook.url);
    if (shared !== undefined && succeededAt > shared) {
      this.clearFailing(intake.merchantId, webhook.url, webhook);
      return;
    }
    let streak = this.streaks.get(key);
    // Failures before a success elsewhere (the clock cleared) or before a long silence do not count.
    if (streak && ((streak.sharedSeen !== undefined && shared === undefined) || at - streak.lastAt > after / 5)) streak = undefined;
    if (!streak) this.streaks.set(key, (streak = { since: at, lastAt: at }));
    streak.sharedSeen = shared;
    streak.lastAt = at;
    const last = webhook.lastFailureAt === undefined ? undefined : Date.parse(webhook.lastFailureAt);
    switch (clockState(shared, last, at, after)) {
      case 'none':
      case 'stale':
        // The clock starts (or starts over) once this dispatcher's own failures span a tenth.
        if (shouldRecordFailing(streak.since, at, after)) {
          this.writeClock(intake.merchantId, webhook.url, 'start failing clock', clockOf(webhook), { url: webhook.url, failingSince: new Date(streak.since).toISOString(), lastFailureAt: new Date(at).toISOString() });
        }
        return;
      case 'refresh': {
        // At most once a tenth: its failures stay spread up to now.
        const running = clockOf(webhook);
        if (running) this.writeClock(intake.merchantId, webhook.url, 'refresh failing clock', running, { ...running, lastFailureAt: new Date(at).toISOString() });
        return;
      }
      case 'due':
        this.disable(intake, webhook.url, now, { attempts, status: status ?? intake.lastStatus, error: error ?? intake.lastError });
        return;
      case 'running':
        return;
    }
  }

  private clearFailing(merchantId: string, url: string, seen: Endpoint | undefined): void {
    const running = clockOf(seen);
    if (running) this.writeClock(merchantId, url, 'clear failing clock', running, undefined);
  }

  private disable(intake: IntakeEvent, url: string, now: Date, last: { attempts?: number; status?: number; error?: string }): void {
    const at = now.getTime();
    const disabledAt = now.toISOString();
    let failingSince: string | undefined;
    let endpointId = '';
    const writer = this.deps.writer;
    const change = (current: Merchant | undefined) => {
      const webhook = current?.endpoints.find((endpoint) => endpoint.url === url);
      if (!current || !webhook?.enabled || webhook.url !== url || !webhook.failingSince) return undefined;
      const last = webhook.lastFailureAt === undefined ? undefined : Date.parse(webhook.lastFailureAt);
      if (clockState(Date.parse(webhook.failingSince), last, at, this.settings.disableAfterMs) !== 'due') return undefined;
      failingSince = webhook.failingSince;
      endpointId = webhook.id;
      return { ...current, endpoints: current.endpoints.map((endpoint) => (endpoint === webhook ? { ...webhook, enabled: false, disabledReason: 'failing' as const, disabledAt } : endpoint)) };
    };
    this.background(intake.merchantId, url, 'disable', writer && (async () => {
      // Only the write that changed the row publishes.
      if (!(await writer.update(intake.merchantId, change)).changed) return;
      this.deps.metrics?.disabled('failing');
      this.deps.logger.warn('endpoint disabled: every attempt failed for ENDPOINT_DISABLE_AFTER', { merchantId: intake.merchantId, endpointId, failingSince, disabledAt });
      this.deps.publisher.emit(
        disabledEvent(
          {
            merchantId: intake.merchantId,
            endpointId,
            url,
            reason: 'failing',
            disabledAt,
            failingSince,
            lastHttpStatus: last.status,
            lastError: last.error,
            webhookId: intake.webhookId,
            event: intake.event,
            references: intake.references,
            attempts: last.attempts ?? intake.attempts,
          },
          now,
        ),
      );
    }));
  }

  /** One write per endpoint at a time, in the background. */
  private background(merchantId: string, url: string, what: string, work: (() => Promise<unknown>) | undefined): void {
    const key = `${merchantId}\n${url}`;
    if (!work || this.writing.has(key)) return;
    this.writing.add(key);
    const running = (async () => {
      try {
        await work();
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

  /** One clock write per endpoint at a time, in the background: endpoint_health only, the merchant's version untouched. */
  private writeClock(merchantId: string, url: string, what: string, seen: Health | undefined, next: Health | undefined): void {
    const writer = this.deps.writer;
    this.background(merchantId, url, what, writer && (() => writer.recordHealth(merchantId, url, seen, next)));
  }
}

/** The clock a webhook shows (the directory merges it from endpoint_health), as the health table holds it. */
function clockOf(webhook: Endpoint | undefined): Health | undefined {
  if (!webhook?.failingSince) return undefined;
  return { url: webhook.url, failingSince: webhook.failingSince, ...(webhook.lastFailureAt ? { lastFailureAt: webhook.lastFailureAt } : {}) };
}
