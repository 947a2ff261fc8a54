import type { DeliveryRecordInput } from '../../../libs/delivery-log/index.js';
import type { RetryPolicy } from '../../../libs/retry-policy/index.js';
import type { AttemptTrace, Decision, Finding } from './decide.js';
import type { IntakeEvent } from './intake.js';

/**
 * The delivery log's record of one settled delivery, from what the walk found and decided; pure.
 * Undefined where there is nothing a merchant could look up: a copy superseded by another, a
 * delivery handed back untried, a message that never passed intake (no merchant, no webhook-id).
 */
export function recordOf(
  intake: IntakeEvent | undefined,
  finding: Finding,
  decision: Decision,
  policy: RetryPolicy,
  now: Date,
): DeliveryRecordInput | undefined {
  if (!intake || decision.kind === 'superseded' || decision.kind === 'returned') return undefined;
  const trace = finding.kind === 'sent' || finding.kind === 'attempt-failed' ? finding.trace : undefined;
  const base = {
    webhookId: intake.webhookId,
    merchantId: intake.merchantId,
    event: intake.event,
    references: intake.references,
    payload: JSON.parse(intake.body) as unknown,
    firstSeenAt: new Date(intake.firstSeenAt).toISOString(),
    at: now.toISOString(),
  };
  const attempt = (httpStatus: number | undefined, error: string | undefined) =>
    trace && {
      startedAt: trace.startedAt.toISOString(),
      durationMs: Math.max(0, Math.round(trace.durationMs)),
      ...(httpStatus !== undefined ? { httpStatus } : {}),
      ...(error !== undefined ? { error: error.slice(0, 1000) } : {}),
      ...(trace.responseBody !== undefined ? { responseBody: trace.responseBody } : {}),
    };
  const nextAt = (tier: number) => new Date(now.getTime() + policy.delayOf(tier)).toISOString();
  switch (decision.kind) {
    case 'delivered':
      return { ...base, outcome: 'delivered', attemptNumber: decision.attempt, attempt: attempt(decision.status, undefined) };
    case 'retry':
      return { ...base, outcome: 'retrying', attemptNumber: decision.attempt, attempt: attempt(decision.status, decision.error), nextAttemptAt: nextAt(decision.tier) };
    case 'defer':
      return { ...base, outcome: 'deferred', attemptNumber: intake.attempts, reason: 'endpoint-busy', nextAttemptAt: nextAt(decision.tier) };
    case 'postpone':
      return { ...base, outcome: 'postponed', attemptNumber: intake.attempts, reason: 'circuit-open', nextAttemptAt: nextAt(decision.tier) };
    case 'failed':
      return {
        ...base,
        outcome: 'failed',
        attemptNumber: decision.attempts,
        reason: decision.reason,
        ...(decision.attempted ? { attempt: attempt(decision.status, decision.error) } : {}),
      };
    case 'skipped':
      return { ...base, outcome: 'skipped', attemptNumber: intake.attempts, reason: decision.why };
    case 'invalid':
      return { ...base, outcome: 'invalid', attemptNumber: intake.attempts, reason: decision.code };
  }
}
