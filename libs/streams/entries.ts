import type { BrokerConnection } from '../broker/index.js';
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
