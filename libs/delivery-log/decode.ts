import { z } from 'zod';
import { checkRecord } from './record-check.js';
import { type DeliveryRecord, deliveryRecordSchema } from './record.js';

/**
 * The records of one stream message. A message that is not JSON or an entry that does not match
 * is dropped (counted, and the first one's reason given), never allowed to stop the recorder.
 * checkRecord accepts the well-formed entries cheaply; zod decides the rest and says why.
 */
export function decodeRecords(body: Buffer): { records: DeliveryRecord[]; rejected: number; reason?: string } {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body.toString('utf8'));
  } catch {
    return { records: [], rejected: 1, reason: 'not JSON' };
  }
  if (!Array.isArray(parsed)) return { records: [], rejected: 1, reason: 'not a JSON array' };
  const records: DeliveryRecord[] = [];
  let rejected = 0;
  let reason: string | undefined;
  for (const entry of parsed) {
    const checked = checkRecord(entry);
    if (checked) {
      records.push(checked);
      continue;
    }
    const result = deliveryRecordSchema.safeParse(entry);
    if (result.success) records.push(result.data);
    else {
      rejected++;
      reason ??= z.prettifyError(result.error);
    }
  }
  return { records, rejected, reason };
}
