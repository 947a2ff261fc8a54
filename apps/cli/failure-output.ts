import type { FailureRow } from '../../libs/failed/index.js';
import { formatTable, truncate } from './table.js';

// REASON beside LAST ERROR: why it ended in failed (an outage, a disabled webhook) and what was last seen.
const HEADER = ['FAILED AT', 'MERCHANT', 'ENDPOINT', 'EVENT', 'REFERENCE', 'WEBHOOK ID', 'ATTEMPTS', 'LAST STATUS', 'REASON', 'LAST ERROR'];

export function failuresTable(records: FailureRow[], withResolved: boolean): string {
  const header = withResolved ? [...HEADER.slice(0, -1), 'RESOLVED', 'LAST ERROR'] : HEADER;
  const rows = records.map((r) => {
    const row = [
      r.failedAt,
      r.merchantId,
      r.endpointId ?? '-',
      r.event,
      r.references.join(','),
      r.webhookId,
      String(r.attempts),
      r.lastStatus === null ? '-' : String(r.lastStatus),
      r.reason ?? '-',
    ];
    if (withResolved) row.push(r.resentAt === null ? 'no' : 'yes');
    row.push(truncate(r.lastError ?? '-', 100));
    return row;
  });
  return formatTable(header, rows);
}

/** The JSON shape scripts rely on: every field present, null when the failure does not carry it. */
export function failureJson(r: FailureRow): Record<string, unknown> {
  return {
    failedAt: r.failedAt,
    merchantId: r.merchantId,
    endpointId: r.endpointId,
    event: r.event,
    references: r.references,
    webhookId: r.webhookId,
    attempts: r.attempts,
    lastStatus: r.lastStatus,
    failedReason: r.reason,
    lastError: r.lastError,
    resolved: r.resentAt !== null,
    resentAt: r.resentAt,
  };
}
