import { randomUUID } from 'node:crypto';
import type { ConsumeMessage } from 'amqplib';
import { type BrokerConnection, BrokerUnavailableError, type Reader } from '../broker/index.js';
import { ENTRY_TYPES } from '../contracts/index.js';
import { appendCheckpoint, isCheckpoint, offsetOf } from '../streams/index.js';
import { decodeResolution, entryTypeOf } from './entries.js';
import { type FailureRecord, failureRecordOf } from './failure-record.js';

export interface SnapshotOptions {
  /**
   * Start reading at the stream chunk written at this time instead of the first entry. Failures
   * written before it are not read, nor needed: a resolution always comes after its failure.
   */
  from?: Date;
  /** Failures to keep; the others are dropped as they are read, so memory holds only matches. */
  match?: (record: FailureRecord) => boolean;
  /** Fails when no entry arrives for this long: the stream stalled or the broker went away. */
  idleTimeoutMs?: number;
}

/**
 * Entry timestamps are the broker's clock and chunk-granular, failure times the dispatcher's: start
 * this much earlier so a failure at `from` is never skipped. Filtering on failed-at is the caller's.
 */
const CLOCK_MARGIN_MS = 5 * 60_000;

/**
 * The failures of the stream as of now, each marked resolved when a later resolution names it.
 * The stream gives no message count, so "now" is a checkpoint entry appended once the read has
 * started: reading it back means every entry written before the call has been seen.
 */
export async function readFailures(broker: BrokerConnection, stream: string, options: SnapshotOptions = {}): Promise<FailureRecord[]> {
  const checkpointId = randomUUID();
  const records = new Map<number, FailureRecord>();
  const idleTimeoutMs = options.idleTimeoutMs ?? 30_000;
  let reader: Reader | undefined;
  let finished = false;
  try {
    await new Promise<void>((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      const fail = (err: Error) => {
        clearTimeout(timer);
        reject(err);
      };
      const idle = () => {
        clearTimeout(timer);
        timer = setTimeout(() => fail(new BrokerUnavailableError(`no entry from ${stream} for ${idleTimeoutMs} ms`)), idleTimeoutMs);
      };
      const onEntry = (message: ConsumeMessage | null) => {
        if (!message) return fail(new BrokerUnavailableError(`the broker cancelled the read of ${stream}`));
        idle();
        if (apply(message, records, checkpointId, options.match)) {
          clearTimeout(timer);
          resolve();
        }
      };
      idle();
      broker
        .openReader(stream, {
          prefetch: 1_000,
          arguments: { 'x-stream-offset': startOffset(options.from) },
          onMessage: onEntry,
          onClose: () => fail(new BrokerUnavailableError(`channel closed while reading ${stream}`)),
        })
        .then(async (opened) => {
          reader = opened;
          if (finished) return void (await opened.close());
          // Appended after the consumer attached, so it is read whatever offset the read started at.
          await appendCheckpoint(broker, stream, checkpointId);
        })
        .catch((err: unknown) => fail(err instanceof BrokerUnavailableError ? err : new BrokerUnavailableError(`cannot read ${stream}`, { cause: err })));
    });
  } finally {
    finished = true;
    await reader?.close();
  }
  return [...records.values()].sort((a, b) => a.offset - b.offset);
}

/** Applies one entry; true once it is this read's own checkpoint. */
function apply(
  message: ConsumeMessage,
  records: Map<number, FailureRecord>,
  checkpointId: string,
  match: SnapshotOptions['match'],
): boolean {
  const headers = message.properties.headers;
  const offset = offsetOf(headers);
  if (offset === undefined) return false;
  switch (entryTypeOf(headers)) {
    case ENTRY_TYPES.failure: {
      const record = failureRecordOf(offset, message.properties);
      if (record && (!match || match(record))) records.set(offset, record);
      return false;
    }
    case ENTRY_TYPES.resolution: {
      for (const { offset: resolved, webhookId } of decodeResolution(message.content)?.resolved ?? []) {
        const record = records.get(resolved);
        // Another webhook at that offset: the resolution was written for an entry of a deleted stream.
        if (record && (webhookId === undefined || record.webhookId === undefined || record.webhookId === webhookId)) record.resolved = true;
      }
      return false;
    }
    case ENTRY_TYPES.checkpoint:
      return isCheckpoint(headers, checkpointId);
    default:
      return false;
  }
}

/** A stream offset spec: the first entry, or a timestamp (AMQP type `T`, seconds) a little before `from`. */
function startOffset(from: Date | undefined): unknown {
  if (!from) return 'first';
  const ms = Math.min(from.getTime(), Date.now()) - CLOCK_MARGIN_MS;
  return { '!': 'timestamp', value: Math.max(0, Math.floor(ms / 1000)) };
}
