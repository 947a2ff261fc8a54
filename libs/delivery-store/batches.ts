import type { Delivery } from '../broker/index.js';
import { ENTRY_TYPES, HEADERS } from '../contracts/index.js';
import { decodeRecords, type DeliveryRecord } from '../delivery-log/index.js';
import { fingerprintOf } from '../streams/index.js';
import type { Quarantined } from './materialise.js';
import { SEQ_PER_OFFSET } from './schema.js';

export interface Pending {
  offset: number;
  delivery: Delivery;
  bytes: number;
  acked?: boolean;
}

/** Acks once (a second ack of a tag closes the channel), and only on the channel it came on. */
export function settle(item: Pending): void {
  if (item.acked) return;
  item.acked = true;
  if (item.delivery.live) item.delivery.ack();
}

/** A batch of the recorder's read-ahead, decoded and serialised for one statement. */
export interface Prepared {
  items: Pending[];
  records: DeliveryRecord[];
  /** Each record's feed position past the stream's seq_base: offset × SEQ_PER_OFFSET + its place. */
  positions: number[];
  /** Each record's stream offset and place in its message. */
  places: Array<[number, number]>;
  /** Entries that are not records (BatchWriter logs each as it sets it aside). */
  refused: Quarantined[];
  nextOffset: number;
  /** The append time of the last of this recorder's checkpoints in the batch. */
  caughtUpAt: Date | null;
  /** The fingerprint of the batch's last entry, stored with the offset past it. */
  lastEntry: string;
}

/**
 * The next batch: the read-ahead past `after` (the last offset stored or already prepared), bounded,
 * with this leader's `checkpoints` (id → append time).
 */
export function prepareBatch(
  buffer: readonly Pending[],
  after: number,
  limits: { messages: number; bytes: number },
  checkpoints: Map<string, number>,
): Prepared | undefined {
  const items: Pending[] = [];
  let bytes = 0;
  for (const p of buffer) {
    if (p.offset <= after) continue;
    if (items.length >= limits.messages || (items.length > 0 && bytes + p.bytes > limits.bytes)) break;
    items.push(p);
    bytes += p.bytes;
  }
  if (items.length === 0) return undefined;
  const batch: Prepared = {
    items,
    records: [],
    positions: [],
    places: [],
    refused: [],
    nextOffset: items.at(-1)!.offset + 1,
    caughtUpAt: null,
    lastEntry: fingerprintOf(items.at(-1)!.delivery.message),
  };
  for (const item of items) {
    const headers = item.delivery.message.properties.headers;
    // A recorder's, to learn where the stream ends: no records, but its offset is stored past it.
    if (headers?.[HEADERS.entryType] === ENTRY_TYPES.checkpoint) {
      const appendedAt = checkpoints.get(String(headers[HEADERS.checkpointId]));
      if (appendedAt !== undefined) {
        checkpoints.delete(String(headers[HEADERS.checkpointId]));
        batch.caughtUpAt = new Date(Math.max(appendedAt, batch.caughtUpAt?.getTime() ?? 0));
      }
      continue;
    }
    const decoded = decodeRecords(item.delivery.message.content);
    for (const refused of decoded.refused) batch.refused.push({ offset: item.offset, ...refused });
    for (let i = 0; i < decoded.records.length; i++) {
      const place = decoded.positions[i]!;
      if (place >= SEQ_PER_OFFSET) {
        // Its feed position would be another message's: a writer of ours never puts this many in one.
        batch.refused.push({ offset: item.offset, position: place, error: `more than ${SEQ_PER_OFFSET} records in one stream message`, content: JSON.stringify(decoded.records[i]) });
        continue;
      }
      batch.records.push(decoded.records[i]!);
      batch.positions.push(item.offset * SEQ_PER_OFFSET + place);
      batch.places.push([item.offset, place]);
    }
  }
  return batch;
}
