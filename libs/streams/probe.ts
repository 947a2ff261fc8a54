import { createHash } from 'node:crypto';
import type { ConsumeMessage } from 'amqplib';
import { type BrokerConnection, BrokerUnavailableError } from '../broker/index.js';
import { ENTRY_TYPES, HEADERS } from '../contracts/index.js';

/** The offset the broker puts on every entry it delivers from a stream. */
export function offsetOf(headers: Record<string, unknown> | undefined): number | undefined {
  const offset = headers?.[HEADERS.streamOffset];
  return typeof offset === 'number' && Number.isSafeInteger(offset) && offset >= 0 ? offset : undefined;
}

/** A reader marks "now" with a checkpoint of its own id: read back, every entry written before it was seen. */
export function appendCheckpoint(broker: BrokerConnection, stream: string, id: string, deadlineMs?: number): Promise<void> {
  return broker.sendToQueue(
    stream,
    Buffer.from('{}'),
    { contentType: 'application/json', headers: { [HEADERS.entryType]: ENTRY_TYPES.checkpoint, [HEADERS.checkpointId]: id } },
    deadlineMs,
  );
}

/**
 * Reads `stream` from `from` until `pick` answers for an entry (undefined: the next one), `during`
 * having run; the broker's cancel, the channel's close or `timeoutMs` answer `ended`'s error.
 */
async function readUntil<T>(
  broker: BrokerConnection,
  stream: string,
  from: number | 'next',
  timeoutMs: number,
  pick: (message: ConsumeMessage, offset: number) => T | undefined,
  during: () => Promise<void> = async () => {},
): Promise<T | BrokerUnavailableError> {
  let settle!: (answer: T | BrokerUnavailableError) => void;
  const answer = new Promise<T | BrokerUnavailableError>((resolve) => (settle = resolve));
  const ended = (why: string) => settle(new BrokerUnavailableError(why));
  const reader = await broker.openReader(stream, {
    prefetch: from === 'next' ? 100 : 10,
    arguments: { 'x-stream-offset': from },
    onMessage: (message) => {
      if (!message) return ended(`the broker cancelled the probe of ${stream}`);
      const offset = offsetOf(message.properties.headers);
      const picked = offset === undefined ? undefined : pick(message, offset);
      if (picked !== undefined) settle(picked);
    },
    onClose: () => ended(`channel closed while probing ${stream}`),
  });
  const timer = setTimeout(() => ended(`nothing read back from ${stream} within ${timeoutMs} ms`), timeoutMs);
  try {
    await during();
    return await answer;
  } finally {
    clearTimeout(timer);
    await reader.close();
  }
}

/** Appends checkpoint `id` and reads where it landed: the offset the stream is at now. */
export async function landCheckpoint(broker: BrokerConnection, stream: string, id: string, timeoutMs: number): Promise<number> {
  const own = (m: ConsumeMessage, at: number) => (m.properties.headers?.[HEADERS.checkpointId] === id ? at : undefined);
  const append = () => appendCheckpoint(broker, stream, id, timeoutMs);
  const landed = await readUntil(broker, stream, 'next', timeoutMs, own, append);
  if (landed instanceof BrokerUnavailableError) throw landed;
  return landed;
}

/** Names one entry of a stream, whatever its offset: a digest of its body and headers. */
export function fingerprintOf(message: ConsumeMessage): string {
  const { [HEADERS.streamOffset]: _offset, ...headers } = message.properties.headers ?? {};
  return createHash('sha256').update(message.content).update('\0').update(JSON.stringify(headers)).digest('base64url').slice(0, 24);
}

/** The fingerprint of the entry at `offset`, or undefined when it cannot tell (gone, past the end, no answer in time). */
export async function fingerprintAt(broker: BrokerConnection, stream: string, offset: number, timeoutMs: number): Promise<string | undefined> {
  // Before `offset`: the rest of the chunk it is in; past it: the entry is gone (null).
  const there = (m: ConsumeMessage, at: number) => (at < offset ? undefined : at === offset ? fingerprintOf(m) : null);
  const entry = await readUntil(broker, stream, offset, timeoutMs, there);
  return typeof entry === 'string' ? entry : undefined;
}
