import { FAILED_REASONS, type FailedReason } from '../../../libs/contracts/index.js';
import { type AttemptErrorClass, type DeliveryFailedError, WebhookBlockedError, WebhookRejectedError } from '../../../libs/http/index.js';
import type { RetryPolicy } from '../../../libs/retry-policy/index.js';
import type { InvalidCode } from '../errors.js';
import type { IntakeEvent } from './intake.js';

/** Why an accepted webhook can no longer be sent to its merchant as things stand. */
export type Unavailable = 'merchant-removed' | 'webhook-disabled' | 'endpoint-disabled' | 'event-not-subscribed';

/** When an attempt was made and what came back, for the delivery log. */
export interface AttemptTrace {
  startedAt: Date;
  durationMs: number;
  /** The first DELIVERY_LOG_RESPONSE_BYTES bytes of the answer, when the client keeps them. */
  responseBody?: string;
}

/**
 * What the stages before the decision found, one per delivery: the intake's verdict, the
 * admission's refusal, or the attempt's result.
 */
export type Finding =
  /** Intake: another copy of the same wait arrived first. */
  | { kind: 'superseded'; key: string }
  /** Intake: upstream published this key before, within INTAKE_DEDUPE_WINDOW (libs/intake-keys). */
  | { kind: 'duplicate'; merchantId: string; webhookId: string }
  /** Intake: the message can never be delivered as it is (or handling it failed unexpectedly). */
  | { kind: 'invalid'; code: InvalidCode; detail: string }
  /** Intake: an ordered merchant's webhook behind an earlier one of its reference; its wait is written. */
  | { kind: 'ordered' }
  /** Intake: a new event for several of the merchant's endpoints: each endpoint's delivery walked from it (stages/fan-out.ts), never decided itself. */
  | { kind: 'fan-out'; endpointIds: string[] }
  /** Admission: no merchant, no active webhook, or the event is filtered out. */
  | { kind: 'unavailable'; why: Unavailable }
  /** Admission: the dispatcher stopped while this delivery waited for a slot. */
  | { kind: 'stopping' }
  /** Admission: the endpoint's throttle has no slot within reach: its place in the endpoint's queue comes in `delayMs`. */
  | { kind: 'throttled'; delayMs: number }
  /** Admission: the endpoint is at its in-flight bound and slow. */
  | { kind: 'busy' }
  /** Admission: the endpoint's circuit is open. */
  | { kind: 'circuit-open'; failures: number; retryInMs: number; lastError?: string }
  /** Attempt: the merchant answered 2xx. */
  | { kind: 'sent'; status: number; trace?: AttemptTrace }
  /** Attempt: it failed (a non-2xx answer, a timeout, a network error, a blocked address); `circuitMs`: the endpoint's circuit is open for that long after it. */
  | { kind: 'attempt-failed'; error: DeliveryFailedError; trace?: AttemptTrace; circuitMs?: number };

/** What happens to the delivery: exactly one of these. */
export type Decision =
  | { kind: 'delivered'; attempt: number; status: number }
  | { kind: 'superseded'; key: string }
  /** Waits for an earlier webhook of its reference (its 'ordered' wait written at intake); no attempt spent. */
  | { kind: 'ordered' }
  | { kind: 'duplicate'; merchantId: string; webhookId: string }
  | { kind: 'skipped'; why: 'webhook-disabled' | 'endpoint-disabled' | 'event-not-subscribed' }
  /** Back to its queue untried, once (stopping). */
  | { kind: 'returned' }
  /** `error` is the detail, for operators (log lines, headers of the steps and `failed`); `errorClass` is what the merchant sees. */
  | { kind: 'retry'; step: number; attempt: number; error: string; errorClass: AttemptErrorClass; status?: number; circuitMs?: number }
  | { kind: 'defer'; step: number }
  /** Waits for the endpoint's throttle: no attempt spent, never failed for it. */
  | { kind: 'throttle'; delayMs: number }
  /** `circuitMs`: when the open circuit lets a probe through, from now. */
  | { kind: 'postpone'; step: number; circuitMs: number }
  | { kind: 'failed'; reason: FailedReason; attempts: number; error: string; errorClass?: AttemptErrorClass; status?: number; attempted: boolean }
  | { kind: 'invalid'; code: InvalidCode; detail: string };

const UNAVAILABLE_MESSAGES: Record<Unavailable, string> = {
  'webhook-disabled': 'webhook disabled',
  'endpoint-disabled': 'endpoint disabled: every attempt failed for ENDPOINT_DISABLE_AFTER',
  'merchant-removed': 'merchant removed from the directory',
  'event-not-subscribed': "event not in the webhook's events",
};

/**
 * The one decision of the delivery path, pure: from what the stages found, the webhook's intake,
 * the retry policy and the time, what happens to the delivery. `intake` is absent only when the
 * message did not pass intake (superseded, duplicate, invalid).
 */
export function decide(finding: Finding, intake: IntakeEvent | undefined, policy: RetryPolicy, now: Date): Decision {
  switch (finding.kind) {
    case 'superseded':
      return { kind: 'superseded', key: finding.key };
    case 'duplicate':
      return finding;
    case 'invalid':
      return { kind: 'invalid', code: finding.code, detail: finding.detail };
    case 'stopping':
      return { kind: 'returned' };
    case 'ordered':
      return { kind: 'ordered' };
    case 'fan-out':
      throw new Error('decide: a fan-out is decided per endpoint (stages/fan-out.ts)');
  }
  if (!intake) throw new Error(`decide: ${finding.kind} needs the intake`);
  switch (finding.kind) {
    case 'unavailable':
      // One already accepted (retrying, resent) goes to failed, to be resent once it is back; a
      // new one is not sent (spec 6.3), and a new one for a merchant nobody knows is invalid.
      if (intake.accepted) {
        return { kind: 'failed', reason: finding.why, attempts: intake.attempts, error: UNAVAILABLE_MESSAGES[finding.why], attempted: false };
      }
      if (finding.why === 'merchant-removed') return { kind: 'invalid', code: 'unknown-merchant', detail: `no merchant ${intake.merchantId} in the directory` };
      return { kind: 'skipped', why: finding.why };
    case 'busy':
      return { kind: 'defer', step: policy.deferStep() };
    case 'throttled':
      return { kind: 'throttle', delayMs: finding.delayMs };
    case 'circuit-open': {
      if (!policy.spanOver(intake.resentAt ?? intake.firstSeenAt, now)) return { kind: 'postpone', step: policy.postponeStep(finding.retryInMs), circuitMs: finding.retryInMs };
      const circuit = `circuit open: the endpoint failed ${finding.failures} times in a row${finding.lastError ? `; last error: ${finding.lastError}` : ''}`;
      // The last real error: this webhook's own, else the endpoint's.
      return { kind: 'failed', reason: FAILED_REASONS.circuitOpen, attempts: intake.attempts, error: intake.lastError ?? circuit, status: intake.lastStatus, attempted: false };
    }
    case 'sent':
      return { kind: 'delivered', attempt: intake.attempts + 1, status: finding.status };
    case 'attempt-failed': {
      const attempt = intake.attempts + 1;
      const { error } = finding;
      const failed = { kind: 'failed' as const, attempts: attempt, error: error.message, errorClass: error.errorClass, status: error.status, attempted: true };
      if (error instanceof WebhookBlockedError) return { ...failed, reason: FAILED_REASONS.blocked };
      // A test event has a schedule of one attempt: it fails like any webhook whose attempts ran out.
      if (intake.test || policy.exhausted(attempt)) return { ...failed, reason: FAILED_REASONS.attemptsExhausted };
      const retryAfter = error instanceof WebhookRejectedError ? error.retryAfter : undefined;
      const step = policy.stepAfterFailure(attempt, { status: error.status, retryAfter }, now);
      return { kind: 'retry', step, attempt, error: error.message, errorClass: error.errorClass, status: error.status, circuitMs: finding.circuitMs };
    }
  }
}
