import type { Options } from 'amqplib';
import type { BrokerConnection } from '../broker/index.js';
import { HEADERS, JOURNAL_ENTRY_TYPES, type ScalarHeaders, scalarHeaders } from '../contracts/index.js';

/**
 * The retries journal is a stream beside the tiers: one `scheduled` entry per message moved into
 * a retry tier (its body and headers, so it can be put back), one `arrived` entry when that
 * message is consumed from dispatch again, and `recovery` claims. A scheduled entry without its
 * arrival long after it was due is a message its tier did not hand back: the retry watch puts the
 * copy back in dispatch.
 */
export interface ScheduledRetry {
  scheduleId: string;
  queue: string;
  dueAt: number;
  content: Buffer;
  /** The properties of the message as it was published to the tier. */
  properties: Options.Publish;
}

const JSON_EMPTY = Buffer.from('{}');

export function appendScheduled(broker: BrokerConnection, stream: string, retry: ScheduledRetry, deadlineMs: number): Promise<void> {
  return broker.sendToQueue(
    stream,
    retry.content,
    {
      ...retry.properties,
      headers: {
        ...(retry.properties.headers as ScalarHeaders | undefined),
        [HEADERS.entryType]: JOURNAL_ENTRY_TYPES.scheduled,
        [HEADERS.scheduleId]: retry.scheduleId,
        [HEADERS.retryQueue]: retry.queue,
        [HEADERS.dueAt]: retry.dueAt,
      },
    },
    deadlineMs,
  );
}

export function appendArrived(broker: BrokerConnection, stream: string, scheduleId: string, deadlineMs: number): Promise<void> {
  return broker.sendToQueue(
    stream,
    JSON_EMPTY,
    { contentType: 'application/json', headers: { [HEADERS.entryType]: JOURNAL_ENTRY_TYPES.arrived, [HEADERS.scheduleId]: scheduleId } },
    deadlineMs,
  );
}

/** A claim to recover these waits; the first claim on each in stream order wins it for a lease. */
export function appendRecoveryClaim(
  broker: BrokerConnection,
  stream: string,
  claim: { claimId: string; at: number; scheduleIds: string[] },
  deadlineMs: number,
): Promise<void> {
  return broker.sendToQueue(
    stream,
    Buffer.from(JSON.stringify({ scheduleIds: claim.scheduleIds })),
    {
      contentType: 'application/json',
      headers: { [HEADERS.entryType]: JOURNAL_ENTRY_TYPES.recovery, [HEADERS.claimId]: claim.claimId, [HEADERS.dueAt]: claim.at },
    },
    deadlineMs,
  );
}

const JOURNAL_ONLY = new Set<string>([HEADERS.entryType, HEADERS.streamOffset, HEADERS.dueAt, HEADERS.retryQueue]);

/** The message to put back in dispatch from a scheduled entry: its own properties, journal headers gone. */
export function recoveredCopy(headers: Record<string, unknown>, claimId: string): ScalarHeaders {
  const copy = scalarHeaders(headers);
  for (const key of Object.keys(copy)) {
    if (JOURNAL_ONLY.has(key) || key.startsWith('x-first-death') || key.startsWith('x-last-death')) delete copy[key];
  }
  copy[HEADERS.recoveredBy] = claimId;
  return copy;
}
