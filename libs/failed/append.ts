import type { BrokerConnection } from '../broker/index.js';
import { ENTRY_TYPES, HEADERS } from '../contracts/index.js';
import { encodeResolution, type Resolution } from './entries.js';

/**
 * Appends a resolution: every index that reads it drops those entries. Its headers repeat what
 * operators look for in the console; the body is what the indexes apply.
 */
export function appendResolution(
  broker: BrokerConnection,
  stream: string,
  resolution: Resolution,
  options: { reference: string; resentAt?: Date; deadlineMs: number },
): Promise<void> {
  return broker.sendToQueue(
    stream,
    encodeResolution(resolution),
    {
      contentType: 'application/json',
      headers: {
        [HEADERS.entryType]: ENTRY_TYPES.resolution,
        [HEADERS.merchantId]: resolution.merchantId,
        [HEADERS.reference]: options.reference,
        [HEADERS.resolvedOffsets]: resolution.resolved.map((r) => r.offset).join(','),
        ...(options.resentAt ? { [HEADERS.resentAt]: options.resentAt.toISOString() } : {}),
      },
    },
    options.deadlineMs,
  );
}
