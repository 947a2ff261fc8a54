import { z } from 'zod';
import { checkRecord } from './record-check.js';
import { type DeliveryRecord, deliveryRecordSchema } from './record.js';

/** An entry of a stream message that is not a record, with its place (-1: the whole message) and why. */
export interface RefusedEntry {
  position: number;
  reason: string;
  /** The entry as JSON text, or the message's first bytes when it was not a JSON array. */
  content: string;
}

export interface DecodedRecords {
  records: DeliveryRecord[];
  /** Each record's place in the message's array. */
  positions: number[];
  rejected: number;
  reason?: string;
  refused: RefusedEntry[];
}

const FIRST_BYTES = 64 * 1024;

/**
 * The records of one stream message. A message that is not JSON or an entry that does not match
 * is refused (counted, with its place and reason, for the recorder to set aside), never allowed to
 * stop the recorder. checkRecord accepts the well-formed entries cheaply; zod decides the rest and
 * says why.
 */
export function decodeRecords(body: Buffer): DecodedRecords {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body.toString('utf8'));
  } catch {
    return whole(body, 'not JSON');
  }
  if (!Array.isArray(parsed)) return whole(body, 'not a JSON array');
  const records: DeliveryRecord[] = [];
  const positions: number[] = [];
  const refused: RefusedEntry[] = [];
  let reason: string | undefined;
  for (let i = 0; i < parsed.length; i++) {
    const entry: unknown = parsed[i];
    const checked = checkRecord(entry);
    if (checked) {
      records.push(checked);
      positions.push(i);
      continue;
    }
    const result = deliveryRecordSchema.safeParse(entry);
    if (result.success) {
      records.push(result.data);
      positions.push(i);
    } else {
      const why = z.prettifyError(result.error);
      reason ??= why;
      refused.push({ position: i, reason: why, content: JSON.stringify(entry) ?? 'undefined' });
    }
  }
  return { records, positions, rejected: refused.length, reason, refused };
}

function whole(body: Buffer, reason: string): DecodedRecords {
  return { records: [], positions: [], rejected: 1, reason, refused: [{ position: -1, reason, content: body.subarray(0, FIRST_BYTES).toString('utf8') }] };
}
