import { z } from 'zod';
import { checkRecord } from './record-check.js';
import { type DeliveryRecord, deliveryRecordSchema } from './record.js';

/** An entry of a stream message that is not a record, with its place (-1: the whole message) and why. */
export interface RefusedEntry {
  position: number;
  error: string;
  /** The entry as JSON text, or the message's first bytes when it was not a JSON array. */
  content: string;
}

/**
 * The records of one stream message, each with its place in the message's array; what is not JSON
 * or does not match is refused. checkRecord accepts the well-formed cheaply; zod decides the rest and says why.
 */
export function decodeRecords(body: Buffer): { records: DeliveryRecord[]; positions: number[]; refused: RefusedEntry[] } {
  const whole = (reason: string) => ({ records: [], positions: [], refused: [{ position: -1, error: reason, content: body.subarray(0, 64 * 1024).toString('utf8') }] });
  let parsed: unknown;
  try {
    parsed = JSON.parse(body.toString('utf8'));
  } catch {
    return whole('not JSON');
  }
  if (!Array.isArray(parsed)) return whole('not a JSON array');
  const records: DeliveryRecord[] = [];
  const positions: number[] = [];
  const refused: RefusedEntry[] = [];
  for (const [i, entry] of (parsed as unknown[]).entries()) {
    const checked = checkRecord(entry);
    const result = checked ? { success: true as const, data: checked } : deliveryRecordSchema.safeParse(entry);
    if (result.success) {
      records.push(result.data);
      positions.push(i);
    } else {
      refused.push({ position: i, error: z.prettifyError(result.error), content: JSON.stringify(entry) ?? 'undefined' });
    }
  }
  return { records, positions, refused };
}
