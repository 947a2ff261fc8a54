import type { Options } from 'amqplib';
import type { BrokerConnection } from '../broker/index.js';
import { copyHeaders, HEADERS, JOURNAL_ENTRY_TYPES, type ScalarHeaders } from '../contracts/index.js';

/**
 * The retries journal is a stream beside the tiers. A `scheduled` entry per message moved into a
 * retry tier (its headers, and its body the first time that webhook waits: later waits point at
 * that entry with x-body-offset); an `arrived` entry each time a copy of a wait is consumed from
 * dispatch (the first copy of a wait in stream order is the one delivered); and `recovery` claims.
 * A scheduled entry that never arrives although dispatch drained after it was due is a message its
 * tier did not hand back: the retry watch puts a copy back in dispatch.
 */
export interface ScheduledRetry {
  scheduleId: string;
  queue: string;
  dueAt: number;
  content: Buffer;
  /** The properties of the message as it was published to the tier. */
  properties: Options.Publish;
  /** Where the journal already holds this webhook's body; the entry then carries none. */
  bodyOffset?: number;
}

const JSON_EMPTY = Buffer.from('{}');
const NO_BODY = Buffer.alloc(0);

export function appendScheduled(broker: BrokerConnection, stream: string, retry: ScheduledRetry, deadlineMs: number): Promise<void> {
  return broker.sendToQueue(
    stream,
    retry.bodyOffset === undefined ? retry.content : NO_BODY,
    {
      ...retry.properties,
      headers: {
        ...(retry.properties.headers as ScalarHeaders | undefined),
        [HEADERS.entryType]: JOURNAL_ENTRY_TYPES.scheduled,
        [HEADERS.scheduleId]: retry.scheduleId,
        [HEADERS.retryQueue]: retry.queue,
        [HEADERS.dueAt]: retry.dueAt,
        ...(retry.bodyOffset === undefined ? {} : { [HEADERS.bodyOffset]: retry.bodyOffset }),
      },
    },
    deadlineMs,
  );
}

/** One copy of a wait was consumed from dispatch; `arrivalId` lets its writer read it back. */
export function appendArrived(
  broker: BrokerConnection,
  stream: string,
  arrival: { key: string; copyId?: string; arrivalId?: string },
  deadlineMs: number,
): Promise<void> {
  const headers: ScalarHeaders = { [HEADERS.entryType]: JOURNAL_ENTRY_TYPES.arrived, [HEADERS.scheduleId]: arrival.key };
  if (arrival.copyId !== undefined) headers[HEADERS.copyId] = arrival.copyId;
  if (arrival.arrivalId !== undefined) headers[HEADERS.claimId] = arrival.arrivalId;
  return broker.sendToQueue(stream, JSON_EMPTY, { contentType: 'application/json', headers }, deadlineMs);
}

/**
 * A claim to recover these waits. A claim wins a wait when the claim it names as the one it
 * replaces (none for a first claim) is the wait's current claim when the entry is read: every
 * reader reaches the same verdict from stream order alone, whatever its clock says.
 */
export function appendRecoveryClaim(
  broker: BrokerConnection,
  stream: string,
  claim: { claimId: string; scheduleIds: string[]; replaces: Record<string, string> },
  deadlineMs: number,
): Promise<void> {
  return broker.sendToQueue(
    stream,
    Buffer.from(JSON.stringify({ scheduleIds: claim.scheduleIds, replaces: claim.replaces })),
    { contentType: 'application/json', headers: { [HEADERS.entryType]: JOURNAL_ENTRY_TYPES.recovery, [HEADERS.claimId]: claim.claimId } },
    deadlineMs,
  );
}

/** The message to put back in dispatch from a scheduled entry: its own properties, journal headers gone, a copy id of its own. */
export function recoveredCopy(headers: Record<string, unknown>, claimId: string, copyId: string): ScalarHeaders {
  const copy = copyHeaders(headers, { from: 'journal-entry' });
  copy[HEADERS.recoveredBy] = claimId;
  copy[HEADERS.copyId] = copyId;
  return copy;
}
