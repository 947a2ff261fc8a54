import type { FailureRecord } from '../../libs/failed/index.js';
import { formatTable, truncate } from './table.js';

// REASON beside LAST ERROR: why it ended in failed (an outage, a disabled webhook) and what was last seen.
const HEADER = ['OFFSET', 'FAILED AT', 'MERCHANT', 'EVENT', 'REFERENCE', 'WEBHOOK ID', 'ATTEMPTS', 'LAST STATUS', 'REASON', 'LAST ERROR'];

export function failuresTable(records: FailureRecord[], withResolved: boolean): string {
  const header = withResolved ? [...HEADER.slice(0, -1), 'RESOLVED', 'LAST ERROR'] : HEADER;
  const rows = records.map((r) => {
    const row = [
      String(r.offset),
      r.failedAt ?? '-',
      r.merchantId,
      r.event ?? '-',
      r.references.join(','),
      r.webhookId ?? '-',
      r.attempts === undefined ? '-' : String(r.attempts),
      r.lastStatus === undefined ? '-' : String(r.lastStatus),
      r.failedReason ?? '-',
    ];
    if (withResolved) row.push(r.resolved ? 'yes' : 'no');
    row.push(truncate(r.lastError ?? '-', 100));
    return row;
  });
  return formatTable(header, rows);
}

/** The JSON shape scripts rely on: every field present, null when the entry does not carry it. */
export function failureJson(r: FailureRecord): Record<string, unknown> {
  return {
    offset: r.offset,
    failedAt: r.failedAt ?? null,
    firstSeenAt: r.firstSeenAt ?? null,
    merchantId: r.merchantId,
    event: r.event ?? null,
    references: r.references,
    webhookId: r.webhookId ?? null,
    attempts: r.attempts ?? null,
    lastStatus: r.lastStatus ?? null,
    failedReason: r.failedReason ?? null,
    lastError: r.lastError ?? null,
    resolved: r.resolved,
  };
}
