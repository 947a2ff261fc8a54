import type { BrokerConnection } from '../broker/index.js';
import { ENTRY_TYPES, HEADERS } from '../contracts/index.js';

/** The offset the broker puts on every entry it delivers from a stream. */
export function offsetOf(headers: Record<string, unknown> | undefined): number | undefined {
  const offset = headers?.[HEADERS.streamOffset];
  return typeof offset === 'number' && Number.isSafeInteger(offset) && offset >= 0 ? offset : undefined;
}

/**
 * The stream gives no message count, so a reader marks "now" by appending a checkpoint with an id
 * of its own: reading it back means every entry written before it has been seen.
 */
export function appendCheckpoint(broker: BrokerConnection, stream: string, id: string, deadlineMs?: number): Promise<void> {
  return broker.sendToQueue(
    stream,
    Buffer.from('{}'),
    { contentType: 'application/json', headers: { [HEADERS.entryType]: ENTRY_TYPES.checkpoint, [HEADERS.checkpointId]: id } },
    deadlineMs,
  );
}
