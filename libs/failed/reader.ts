import type { ConsumeMessage } from 'amqplib';
import { type BrokerConnection, BrokerUnavailableError } from '../broker/index.js';
import { offsetOf } from './entries.js';

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
export async function readEntryAt(
  broker: BrokerConnection,
  stream: string,
  offset: number,
  timeoutMs = 5_000,
): Promise<ConsumeMessage> {
  const channel = await broker.createChannel();
  try {
    await channel.prefetch(100);
    return await new Promise<ConsumeMessage>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new BrokerUnavailableError(`no entry at offset ${offset} of ${stream} within ${timeoutMs} ms`)),
        timeoutMs,
      );
      channel.on('close', () => reject(new BrokerUnavailableError('channel closed while reading the failed stream')));
      channel
        .consume(
          stream,
          (message) => {
            if (!message) return;
            channel.ack(message);
            const at = offsetOf(message.properties.headers);
            if (at === undefined || at < offset) return;
            clearTimeout(timer);
            if (at > offset) reject(new EntryExpiredError(offset));
            else resolve(message);
          },
          { noAck: false, arguments: { 'x-stream-offset': offset } },
        )
        .catch((err: unknown) => {
          clearTimeout(timer);
          reject(new BrokerUnavailableError('cannot read the failed stream', { cause: err }));
        });
    });
  } finally {
    await channel.close().catch(() => {});
  }
}

/** The offset of the stream's oldest entry still kept; undefined when the stream is empty. */
export async function firstOffset(broker: BrokerConnection, stream: string, timeoutMs = 5_000): Promise<number | undefined> {
  const channel = await broker.createChannel();
  try {
    await channel.prefetch(1);
    return await new Promise<number | undefined>((resolve, reject) => {
      // An empty stream delivers nothing: after the timeout there is nothing to expire.
      const timer = setTimeout(() => resolve(undefined), timeoutMs);
      channel.on('close', () => reject(new BrokerUnavailableError('channel closed while reading the failed stream')));
      channel
        .consume(
          stream,
          (message) => {
            if (!message) return;
            clearTimeout(timer);
            resolve(offsetOf(message.properties.headers));
          },
          { noAck: false, arguments: { 'x-stream-offset': 'first' } },
        )
        .catch((err: unknown) => {
          clearTimeout(timer);
          reject(new BrokerUnavailableError('cannot read the failed stream', { cause: err }));
        });
    });
  } finally {
    await channel.close().catch(() => {});
  }
}
