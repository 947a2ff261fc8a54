import { randomUUID } from 'node:crypto';
import { ENTRY_TYPES, HEADERS, type ScalarHeaders } from '../contracts/index.js';

/** What a failure entry records about the webhook's last attempt, or why it had none. */
export interface FailureFacts {
  reason: string;
  failedAt: Date;
  attempts: number;
  lastError: string;
  lastStatus?: number;
  /** Absent when the failure was not an attempt (an open circuit, a webhook no longer available). */
  lastAttemptAt?: Date;
}

/**
 * The headers of a failure entry: the webhook's own (not an earlier attempt's status) and the
 * failure's, with an id of its own: deleting the stream starts offsets over.
 */
export function failureEntryHeaders(webhook: ScalarHeaders, facts: FailureFacts): ScalarHeaders {
  const headers: ScalarHeaders = { ...webhook };
  delete headers[HEADERS.lastStatus];
  headers[HEADERS.attempts] = facts.attempts;
  headers[HEADERS.lastError] = facts.lastError.slice(0, 500);
  if (facts.lastAttemptAt) headers[HEADERS.lastAttemptAt] = facts.lastAttemptAt.toISOString();
  if (facts.lastStatus !== undefined) headers[HEADERS.lastStatus] = facts.lastStatus;
  headers[HEADERS.entryType] = ENTRY_TYPES.failure;
  headers[HEADERS.failureId] = randomUUID();
  headers[HEADERS.failedReason] = facts.reason;
  headers[HEADERS.failedAt] = facts.failedAt.toISOString();
  return headers;
}
