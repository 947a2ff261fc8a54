import { type FailureRecord, failedAtMs } from '../../libs/failed/index.js';

export interface FailureFilter {
  merchantId?: string;
  reference?: string;
  since?: Date;
  until?: Date;
}

/** since inclusive, until exclusive; an entry without a valid failed-at never matches a time bound. */
export function matchesFailure(filter: FailureFilter): (record: FailureRecord) => boolean {
  return (record) => {
    if (filter.merchantId !== undefined && record.merchantId !== filter.merchantId) return false;
    if (filter.reference !== undefined && !record.references.includes(filter.reference)) return false;
    if (filter.since === undefined && filter.until === undefined) return true;
    const at = failedAtMs(record);
    if (at === undefined) return false;
    if (filter.since !== undefined && at < filter.since.getTime()) return false;
    if (filter.until !== undefined && at >= filter.until.getTime()) return false;
    return true;
  };
}
