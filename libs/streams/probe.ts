import { createHash } from 'node:crypto';
import type { ConsumeMessage } from 'amqplib';
import { type BrokerConnection, BrokerUnavailableError } from '../broker/index.js';
import { HEADERS } from '../contracts/index.js';
import { within } from '../runtime/timers.js';
import { appendCheckpoint, offsetOf } from './entries.js';

/** Appends checkpoint `id` and reads where it landed: the offset the stream is at now. */
export async function landCheckpoint(broker: BrokerConnection, stream: string, id: string, timeoutMs: number): Promise<number> {
  let found!: (offset: number) => void;
  let failed!: (err: Error) => void;
  const landed = new Promise<number>((resolve, reject) => {
    found = resolve;
    failed = reject;
  });
  landed.catch(() => {}); // settled before it is awaited when the append fails
  const reader = await broker.openReader(stream, {
    prefetch: 100,
    arguments: { 'x-stream-offset': 'next' },
    onMessage: (message) => {
      if (!message) return failed(new BrokerUnavailableError(`the broker cancelled the probe of ${stream}`));
      const offset = offsetOf(message.properties.headers);
      if (offset !== undefined && message.properties.headers?.[HEADERS.checkpointId] === id) found(offset);
    },
    onClose: () => failed(new BrokerUnavailableError(`channel closed while probing ${stream}`)),
  });
  const timer = setTimeout(() => failed(new BrokerUnavailableError(`checkpoint not read back from ${stream} within ${timeoutMs} ms`)), timeoutMs);
  try {
    await appendCheckpoint(broker, stream, id, timeoutMs);
    return await landed;
  } finally {
    clearTimeout(timer);
    await reader.close();
  }
}

/** Names one entry of a stream, whatever its offset: a digest of its body and headers. */
export function fingerprintOf(message: ConsumeMessage): string {
  const { [HEADERS.streamOffset]: _offset, ...headers } = message.properties.headers ?? {};
  return createHash('sha256').update(message.content).update('\0').update(JSON.stringify(headers)).digest('base64url').slice(0, 24);
}

/** The fingerprint of the entry at `offset`, or undefined when it cannot tell (gone, past the end, no answer in time). */
export async function fingerprintAt(broker: BrokerConnection, stream: string, offset: number, timeoutMs: number): Promise<string | undefined> {
  let settle!: (entry: ConsumeMessage | undefined) => void;
  const answer = new Promise<ConsumeMessage | undefined>((resolve) => (settle = resolve));
  const reader = await broker.openReader(stream, {
    prefetch: 10,
    arguments: { 'x-stream-offset': offset },
    onMessage: (message) => {
      if (!message) return settle(undefined);
      const at = offsetOf(message.properties.headers);
      if (at === undefined || at < offset) return;
      settle(at === offset ? message : undefined);
    },
    onClose: () => settle(undefined),
  });
  try {
    const entry = await within(timeoutMs, answer);
    return entry && fingerprintOf(entry);
  } finally {
    await reader.close();
  }
}
