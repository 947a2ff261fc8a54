import type { BrokerConnection } from '../broker/index.js';
import { ENTRY_TYPES, HEADERS } from '../contracts/index.js';
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
