import type { BrokerConnection } from '../broker/index.js';
import { ENTRY_TYPES, HEADERS } from '../contracts/index.js';
import { appendEntry } from './append.js';

/**
 * The stream gives no message count, so a reader marks "now" by appending a checkpoint with an id of
 * its own: reading it back means every entry written before it has been seen.
 */
export function appendCheckpoint(broker: BrokerConnection, stream: string, id: string, deadlineMs?: number): Promise<void> {
  return appendEntry(broker, stream, ENTRY_TYPES.checkpoint, Buffer.from('{}'), { [HEADERS.checkpointId]: id }, deadlineMs);
}

export function isCheckpoint(headers: Record<string, unknown> | undefined, id: string | undefined): boolean {
  return id !== undefined && headers?.[HEADERS.checkpointId] === id;
}
