import { randomUUID } from 'node:crypto';
import type { Attempt, DeliveryRecordInput } from '../../../libs/delivery-log/index.js';
import type { RetryPolicy } from '../../../libs/retry-policy/index.js';
import type { Decision, Finding } from './decide.js';
import type { IntakeEvent } from './intake.js';

/** The delivery log's record of one settled delivery; pure. Undefined where there is nothing a merchant could look up. */
export function recordOf(
  intake: IntakeEvent | undefined, finding: Finding, decision: Decision, policy: RetryPolicy, now: Date,
): DeliveryRecordInput | undefined {
  if (!intake || decision.kind === 'superseded' || decision.kind === 'erased' || decision.kind === 'returned') return undefined;
  const trace = finding.kind === 'sent' || finding.kind === 'attempt-failed' ? finding.trace : undefined;
  // A fresh webhook's first-seen time is `now`: its text is made once.
  const at = now.toISOString();
  const firstSeenAt = intake.firstSeenAt === at ? at : new Date(intake.firstSeenAt).toISOString();
  // One literal per record, not a shared base spread into each: the hot path.
  const record = (outcome: DeliveryRecordInput['outcome'], attemptNumber: number, reason?: string, nextAttemptAt?: string, attempt?: Attempt): DeliveryRecordInput => ({
    id: randomUUID(), at, webhookId: intake.webhookId, merchantId: intake.merchantId, endpointId: intake.endpointId,
    event: intake.event, references: intake.references, payload: intake.body, firstSeenAt, outcome, attemptNumber,
    resend: intake.resend, attempt, nextAttemptAt, reason,
  });
  // What the merchant reads: the error's class (never its message) and an answer's first bytes only when there was one.
  const attempt = (httpStatus: number | undefined, errorClass: string | undefined): Attempt | undefined => {
    if (!trace) return undefined;
    const made: Attempt = { startedAt: trace.startedAt === now ? at : trace.startedAt.toISOString(), durationMs: Math.max(0, Math.round(trace.durationMs)) };
    if (httpStatus !== undefined) {
      made.httpStatus = httpStatus;
      if (trace.responseBody !== undefined) made.responseBody = trace.responseBody;
    }
    if (errorClass !== undefined) made.error = errorClass;
    return made;
  };
  const nextAt = (delayMs: number) => new Date(now.getTime() + delayMs).toISOString();
  switch (decision.kind) {
    case 'delivered':
      return record('delivered', decision.attempt, undefined, undefined, attempt(decision.status, undefined));
    case 'retry':
      return record('retrying', decision.attempt, undefined, nextAt(policy.delayOf(decision.step)), attempt(decision.status, decision.errorClass));
    case 'defer':
      return record('deferred', intake.attempts, 'endpoint-busy', nextAt(policy.delayOf(decision.step)));
    case 'throttle':
      return record('deferred', intake.attempts, 'throttled', nextAt(decision.delayMs));
    case 'postpone':
      return record('postponed', intake.attempts, 'circuit-open', nextAt(policy.delayOf(decision.step)));
    case 'failed':
      return record('failed', decision.attempts, decision.reason, undefined, decision.attempted ? attempt(decision.status, decision.errorClass) : undefined);
    case 'ordered':
      return record('deferred', intake.attempts, 'ordered');
    case 'skipped':
      return record('skipped', intake.attempts, decision.why);
    case 'invalid':
      return record('invalid', intake.attempts, decision.code);
  }
}
