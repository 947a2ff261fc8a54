import { FAILED_REASONS, type FailedReason } from '../../../libs/contracts/index.js';
import { type AttemptErrorClass, type DeliveryFailedError, WebhookBlockedError, WebhookRejectedError } from '../../../libs/http/index.js';
import type { OrderEnd } from '../../../libs/ordering/index.js';
import type { RetryPolicy } from '../../../libs/retry-policy/index.js';
import type { InvalidCode } from '../errors.js';
import type { HandBack, IntakeEvent } from './intake.js';

/** Why an accepted webhook can no longer be sent to its merchant as things stand. */
export type Unavailable = 'merchant-removed' | 'webhook-disabled' | 'endpoint-disabled' | 'event-not-subscribed';

export interface AttemptTrace {
  startedAt: Date;
  durationMs: number;
  /** The first DELIVERY_LOG_RESPONSE_BYTES bytes of the answer. */
  responseBody?: string;
}

/** What the stages before the decision found, one per delivery: intake's verdict, admission's refusal, or the attempt's result. */
export type Finding =
  /** Another copy of the same wait is current. */
  | { kind: 'superseded'; key: string }
  /** Its merchant was deleted: dropped, nothing of it written or sent. */
  | { kind: 'erased'; merchantId: string; webhookId: string }
  /** Upstream published this key within INTAKE_DEDUPE_WINDOW; `changed`: with another body. */
  | { kind: 'duplicate'; merchantId: string; webhookId: string; changed?: boolean }
  /** `handTaken` (a hand-back whose hand is current) and `places` (taken by an earlier walk) end with the park. */
  | { kind: 'invalid'; code: InvalidCode; detail: string; handTaken?: HandBack; places?: OrderEnd[] }
  /** Behind an earlier webhook of its reference: its 'ordered' wait is written. */
  | { kind: 'ordered' }
  /** A new event for several endpoints: each walked apart (stages/fan-out.ts), never decided itself. */
  | { kind: 'fan-out'; endpointIds: string[] }
  | { kind: 'unavailable'; why: Unavailable }
  /** The dispatcher stopped (or the channel closed) while it waited. */
  | { kind: 'stopping' }
  /** No throttle slot within reach: its place in the endpoint's queue comes in `delayMs`. */
  | { kind: 'throttled'; delayMs: number }
  /** The endpoint is at its in-flight bound and slow. */
  | { kind: 'busy' }
  | { kind: 'circuit-open'; failures: number; retryInMs: number; lastError?: string }
  /** `breakerClosed`: answered through the open circuit of this endpoint (its id), which closes. */
  | { kind: 'sent'; status: number; trace?: AttemptTrace; breakerClosed?: string }
  /** `circuitMs`: its failure opens the endpoint's circuit for that long. `answered`: a 4xx other than 408, 429. */
  | { kind: 'attempt-failed'; error: DeliveryFailedError; trace?: AttemptTrace; circuitMs?: number; answered?: boolean; breakerClosed?: string };

/** What happens to the delivery: exactly one of these. */
export type Decision =
  | Extract<Finding, { kind: 'superseded' | 'erased' | 'duplicate' | 'invalid' | 'ordered' }>
  | { kind: 'delivered'; attempt: number; status: number; breakerClosed?: string }
  | { kind: 'skipped'; why: 'webhook-disabled' | 'endpoint-disabled' | 'event-not-subscribed' }
  /** Back to its queue untried (stopping). */
  | { kind: 'returned' }
  /** `error` is for operators, `errorClass` what the merchant sees; `closesCircuit`: the endpoint answered (a 4xx). */
  | { kind: 'retry'; step: number; attempt: number; error: string; errorClass: AttemptErrorClass; status?: number; circuitMs?: number; closesCircuit?: boolean; breakerClosed?: string }
  | { kind: 'defer'; step: number }
  | { kind: 'throttle'; delayMs: number }
  | { kind: 'postpone'; step: number }
  | { kind: 'failed'; reason: FailedReason; attempts: number; error: string; errorClass?: AttemptErrorClass; status?: number; attempted: boolean; closesCircuit?: boolean; breakerClosed?: string };

const UNAVAILABLE_MESSAGES: Record<Unavailable, string> = {
  'webhook-disabled': 'webhook disabled',
  'endpoint-disabled': 'endpoint disabled: every attempt failed for ENDPOINT_DISABLE_AFTER',
  'merchant-removed': 'merchant removed from the directory',
  'event-not-subscribed': "event not in the webhook's events",
};

/** The one decision of the delivery path, pure. `intake` is absent only when the message did not pass intake. */
export function decide(finding: Finding, intake: IntakeEvent | undefined, policy: RetryPolicy, now: Date): Decision {
  switch (finding.kind) {
    case 'superseded':
    case 'erased':
    case 'duplicate':
    case 'invalid':
    case 'ordered':
      return finding;
    case 'stopping':
      return { kind: 'returned' };
    case 'fan-out':
      throw new Error('decide: a fan-out is decided per endpoint (stages/fan-out.ts)');
  }
  if (!intake) throw new Error(`decide: ${finding.kind} needs the intake`);
  switch (finding.kind) {
    case 'unavailable':
      // One already accepted goes to failed, to be resent; a new one is skipped (spec 6.3), or invalid for an unknown merchant.
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
      if (!policy.spanOver(intake.resentAt ?? intake.firstSeenAt, now)) return { kind: 'postpone', step: policy.postponeStep(finding.retryInMs) };
      const circuit = `circuit open: the endpoint failed ${finding.failures} times in a row${finding.lastError ? `; last error: ${finding.lastError}` : ''}`;
      // The last real error: this webhook's own, else the endpoint's.
      return { kind: 'failed', reason: FAILED_REASONS.circuitOpen, attempts: intake.attempts, error: intake.lastError ?? circuit, status: intake.lastStatus, attempted: false };
    }
    case 'sent':
      return { kind: 'delivered', attempt: intake.attempts + 1, status: finding.status, ...(finding.breakerClosed ? { breakerClosed: finding.breakerClosed } : {}) };
    case 'attempt-failed': {
      const attempt = intake.attempts + 1;
      const { error } = finding;
      const answered = { ...(finding.answered ? { closesCircuit: true } : {}), ...(finding.breakerClosed ? { breakerClosed: finding.breakerClosed } : {}) };
      const failed = { kind: 'failed' as const, attempts: attempt, error: error.message, errorClass: error.errorClass, status: error.status, attempted: true, ...answered };
      if (error instanceof WebhookBlockedError) return { ...failed, reason: FAILED_REASONS.blocked };
      // A test event has a schedule of one attempt.
      if (intake.test || policy.exhausted(attempt)) return { ...failed, reason: FAILED_REASONS.attemptsExhausted };
      const answer = error instanceof WebhookRejectedError ? { retryAfter: error.retryAfter, date: error.date } : {};
      const step = policy.stepAfterFailure(attempt, { status: error.status, ...answer }, now);
      return { kind: 'retry', step, attempt, error: error.message, errorClass: error.errorClass, status: error.status, circuitMs: finding.circuitMs, ...answered };
    }
  }
}
