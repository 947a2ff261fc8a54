import { randomUUID } from 'node:crypto';
import type { Attempt, DeliveryRecordInput } from '../../../libs/delivery-log/index.js';
import type { RetryPolicy } from '../../../libs/retry-policy/index.js';
import type { Decision, Finding } from './decide.js';
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
  // `now` is the walk's one clock reading: a fresh webhook's first-seen time and its attempt's
  // start are that same instant, so its text is made once.
  const at = now.toISOString();
  const firstSeenAt = intake.firstSeenAt === at ? at : new Date(intake.firstSeenAt).toISOString();
  // One literal per record: spreading a shared base into each cost more than the rest of recordOf.
  const record = (outcome: DeliveryRecordInput['outcome'], attemptNumber: number): DeliveryRecordInput => ({
    id: randomUUID(),
    at,
    webhookId: intake.webhookId,
    merchantId: intake.merchantId,
    endpointId: intake.endpointId,
    event: intake.event,
    references: intake.references,
    payload: intake.body,
    firstSeenAt,
    outcome,
    attemptNumber,
    resend: intake.resend,
  });
  // What the merchant reads: the error's class (never its message: an address, an OS message) and
  // the first bytes of an answer only when there was one (never for a blocked target).
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
  const nextAt = (step: number) => new Date(now.getTime() + policy.delayOf(step)).toISOString();
  let made: DeliveryRecordInput;
  switch (decision.kind) {
    case 'delivered':
      made = record('delivered', decision.attempt);
      made.attempt = attempt(decision.status, undefined);
      return made;
    case 'retry':
      made = record('retrying', decision.attempt);
      made.attempt = attempt(decision.status, decision.errorClass);
      made.nextAttemptAt = nextAt(decision.step);
      return made;
    case 'defer':
      made = record('deferred', intake.attempts);
      made.reason = 'endpoint-busy';
      made.nextAttemptAt = nextAt(decision.step);
      return made;
    case 'throttle':
      made = record('deferred', intake.attempts);
      made.reason = 'throttled';
      made.nextAttemptAt = new Date(now.getTime() + decision.delayMs).toISOString();
      return made;
    case 'postpone':
      made = record('postponed', intake.attempts);
      made.reason = 'circuit-open';
      made.nextAttemptAt = nextAt(decision.step);
      return made;
    case 'failed':
      made = record('failed', decision.attempts);
      made.reason = decision.reason;
      if (decision.attempted) made.attempt = attempt(decision.status, decision.errorClass);
      return made;
    case 'ordered':
      // Waits for an earlier webhook of its reference: due when that one ends, not at a time.
      made = record('deferred', intake.attempts);
      made.reason = 'ordered';
      return made;
    case 'skipped':
      made = record('skipped', intake.attempts);
      made.reason = decision.why;
      return made;
    case 'invalid':
      made = record('invalid', intake.attempts);
      made.reason = decision.code;
      return made;
  }
}
