import { randomUUID } from 'node:crypto';
import type { BrokerConnection } from '../broker/index.js';
import { ENTRY_TYPES, HEADERS, type ScalarHeaders } from '../contracts/index.js';
import { type Claim, encodeClaim, encodeResolution, type EntryType, type Resolution } from './entries.js';

/**
 * Appends one entry of `type` to the failed stream. Headers repeat what operators look for in the
 * console; the body is what the indexes apply. With `deadlineMs`, a publish the broker does not
 * confirm in time fails (BrokerUnavailableError).
 */
export function appendEntry(
  broker: BrokerConnection,
  stream: string,
  type: EntryType,
  body: Buffer,
  headers: Record<string, string | number>,
  deadlineMs?: number,
): Promise<void> {
  return broker.sendToQueue(stream, body, { contentType: 'application/json', headers: { [HEADERS.entryType]: type, ...headers } }, deadlineMs);
}

/** A resolution: every index that reads it drops those entries. */
export function appendResolution(
  broker: BrokerConnection,
  stream: string,
  resolution: Resolution,
  options: { reference: string; resentAt?: Date; deadlineMs: number },
): Promise<void> {
  return appendEntry(
    broker,
    stream,
    ENTRY_TYPES.resolution,
    encodeResolution(resolution),
    {
      [HEADERS.merchantId]: resolution.merchantId,
      [HEADERS.reference]: options.reference,
      [HEADERS.resolvedOffsets]: resolution.resolved.map((r) => r.offset).join(','),
      ...(options.resentAt ? { [HEADERS.resentAt]: options.resentAt.toISOString() } : {}),
    },
    options.deadlineMs,
  );
}

/** A claim on failure entries; every index decides it the same way, in stream order. */
export function appendClaim(broker: BrokerConnection, stream: string, claim: Claim, deadlineMs: number): Promise<void> {
  return appendEntry(
    broker,
    stream,
    ENTRY_TYPES.claim,
    encodeClaim(claim),
    { [HEADERS.claimId]: claim.claimId, [HEADERS.merchantId]: claim.merchantId },
    deadlineMs,
  );
}

/** What a failure entry records about the webhook's last attempt, or why it had none. */
export interface FailureFacts {
  reason: string;
  failedAt: Date;
  attempts: number;
  lastError: string;
  lastStatus?: number;
  /** Absent when the failure was not an attempt (an open circuit, a webhook no longer available). */
  lastAttemptAt?: Date;
  /** The entry's own id (x-failure-id); a fresh random one when absent. */
  failureId?: string;
}

/**
 * The headers of a failure entry: the webhook's own (`webhook`: who, which event, references,
 * first seen) and the failure's. A status from an earlier attempt is not carried: the entry says
 * what the last attempt answered, or nothing. The entry gets an id of its own because its offset
 * is no identity: deleting the stream (the only way to empty it) starts offsets over at 0.
 */
export function failureEntryHeaders(webhook: ScalarHeaders, facts: FailureFacts): ScalarHeaders {
  const headers: ScalarHeaders = { ...webhook };
  delete headers[HEADERS.lastStatus];
  headers[HEADERS.attempts] = facts.attempts;
  headers[HEADERS.lastError] = facts.lastError.slice(0, 500);
  if (facts.lastAttemptAt) headers[HEADERS.lastAttemptAt] = facts.lastAttemptAt.toISOString();
  if (facts.lastStatus !== undefined) headers[HEADERS.lastStatus] = facts.lastStatus;
  headers[HEADERS.entryType] = ENTRY_TYPES.failure;
  headers[HEADERS.failureId] = facts.failureId ?? randomUUID();
  headers[HEADERS.failedReason] = facts.reason;
  headers[HEADERS.failedAt] = facts.failedAt.toISOString();
  return headers;
}
