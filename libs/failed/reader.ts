// TEMPORARY: only the retry watch (deleted by the retry-net branch) still reads this.
import type { ConsumeMessage } from 'amqplib';
import { type BrokerConnection, BrokerUnavailableError, type Reader } from '../broker/index.js';
import { offsetOf } from '../streams/index.js';

/** The entry is no longer in the stream: retention (FAILED_RETENTION) removed it. */
export class EntryExpiredError extends Error {
  constructor(readonly offset: number) {
    super(`failed entry at offset ${offset} has expired`);
    this.name = 'EntryExpiredError';
  }
}

/**
 * Reads the entry at one offset. The broker starts delivering at the chunk that holds the offset,
 * so earlier entries are skipped; if the first entry is past the offset, retention removed it.
 */
export function readEntryAt(broker: BrokerConnection, stream: string, offset: number, timeoutMs = 5_000): Promise<ConsumeMessage> {
  return readStream<ConsumeMessage>(broker, stream, offset, 100, timeoutMs, (message, settle) => {
    const at = offsetOf(message.properties.headers);
    if (at === undefined || at < offset) return;
    settle(() => {
      if (at > offset) throw new EntryExpiredError(offset);
      return message;
    });
  }, () => {
    throw new BrokerUnavailableError(`no entry at offset ${offset} of ${stream} within ${timeoutMs} ms`);
  });
}

/**
 * Reads the entries at several offsets with one reader: from the lowest, forward, until each is
 * seen or passed. An offset passed without its entry was removed by retention and is absent from
 * the answer; so are those not reached within `timeoutMs` (the caller tries those again later).
 */
export function readEntriesAt(broker: BrokerConnection, stream: string, offsets: readonly number[], timeoutMs = 10_000): Promise<Map<number, ConsumeMessage>> {
  const wanted = new Set(offsets);
  const found = new Map<number, ConsumeMessage>();
  if (wanted.size === 0) return Promise.resolve(found);
  const last = Math.max(...wanted);
  return readStream<Map<number, ConsumeMessage>>(broker, stream, Math.min(...wanted), 1_000, timeoutMs, (message, settle) => {
    const at = offsetOf(message.properties.headers);
    if (at === undefined) return;
    if (wanted.has(at)) found.set(at, message);
    if (at >= last || found.size === wanted.size) settle(() => found);
  }, () => {
    if (found.size === 0) throw new BrokerUnavailableError(`no entry of ${wanted.size} read from ${stream} within ${timeoutMs} ms`);
    return found;
  });
}

/** The offset of the stream's oldest entry still kept; undefined when the stream is empty. */
export function firstOffset(broker: BrokerConnection, stream: string, timeoutMs = 5_000): Promise<number | undefined> {
  return readStream<number | undefined>(
    broker,
    stream,
    'first',
    1,
    timeoutMs,
    (message, settle) => settle(() => offsetOf(message.properties.headers)),
    // An empty stream delivers nothing: after the timeout there is nothing to expire.
    () => undefined,
  );
}

/**
 * Consumes the stream from `start` with a one-off reader until `onMessage` settles the answer (a
 * value, or an error thrown by its thunk) or `timeoutMs` passes, then closes the reader, which
 * cancels its consumer first (a stream consumer closed without a cancel stays on RabbitMQ 3.10).
 */
async function readStream<T>(
  broker: BrokerConnection,
  stream: string,
  start: number | 'first',
  prefetch: number,
  timeoutMs: number,
  onMessage: (message: ConsumeMessage, settle: (answer: () => T) => void) => void,
  onTimeout: () => T,
): Promise<T> {
  let done = false;
  let resolveAnswer!: (value: T) => void;
  let rejectAnswer!: (err: unknown) => void;
  const answer = new Promise<T>((resolve, reject) => {
    resolveAnswer = resolve;
    rejectAnswer = reject;
  });
  const settle = (thunk: () => T) => {
    if (done) return;
    done = true;
    clearTimeout(timer);
    try {
      resolveAnswer(thunk());
    } catch (err) {
      rejectAnswer(err);
    }
  };
  const fail = (err: Error) => settle(() => {
    throw err;
  });
  const timer = setTimeout(() => settle(onTimeout), timeoutMs);
  // The deadline covers opening the reader too: a consume on a stream whose leader was just lost
  // can wait for its consume-ok far longer than the read may take. A reader opened after the
  // answer is closed as soon as it is.
  let opened: Reader | undefined;
  const opening = broker.openReader(stream, {
    prefetch,
    arguments: { 'x-stream-offset': start },
    onMessage: (message) => {
      if (message) onMessage(message, settle);
      else fail(new BrokerUnavailableError(`the broker cancelled the read of ${stream}`));
    },
    onClose: () => fail(new BrokerUnavailableError(`channel closed while reading ${stream}`)),
  });
  opening.then(
    (reader) => {
      opened = reader;
      if (done) void reader.close();
    },
    (err: unknown) => fail(err instanceof BrokerUnavailableError ? err : new BrokerUnavailableError(`cannot read ${stream}`, { cause: err })),
  );
  try {
    return await answer;
  } finally {
    await opened?.close();
  }
}
