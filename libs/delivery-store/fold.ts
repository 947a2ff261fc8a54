import type { WebhookStatus } from '../delivery-log/index.js';
import type { WebhookDetail } from './views.js';

/** Which status a webhook of several deliveries shows: pending while one is, then failed, delivered, skipped. */
const RANK: Record<WebhookStatus, number> = { skipped: 0, delivered: 1, failed: 2, retrying: 3 };

const earliest = (values: Array<string | null>) => values.filter((v): v is string => v !== null).sort()[0] ?? null;
const latest = (values: Array<string | null>) => values.filter((v): v is string => v !== null).sort().at(-1) ?? null;

/**
 * The delivery whose last attempt came last: by its record's position in the deliveries stream, not
 * by the hosts' clocks; by time only when an attempted delivery has no position (stored before 0019).
 */
function lastAttempted(details: readonly WebhookDetail[], positions: ReadonlyArray<number | null>): WebhookDetail {
  const attempted = details.flatMap((d, i) => (d.lastAttemptAt === null ? [] : [i]));
  if (attempted.length > 0 && attempted.every((i) => positions[i] !== null && positions[i] !== undefined)) {
    return details[attempted.reduce((a, b) => (positions[b]! > positions[a]! ? b : a))]!;
  }
  return [...details].sort((a, b) => (a.lastAttemptAt ?? '').localeCompare(b.lastAttemptAt ?? '')).at(-1)!;
}

/**
 * A webhook's detail from its deliveries' (one per endpoint), folded: the most pending status, the
 * attempts' sum, the last status and error of the latest attempted delivery. `positions[i]`: the
 * stream position of `details[i]`'s last attempt's record (null: none kept).
 */
export function foldDeliveries(details: readonly WebhookDetail[], positions: ReadonlyArray<number | null> = []): WebhookDetail {
  if (details.length === 1) return details[0]!;
  const last = lastAttempted(details, positions);
  const sorted = [...details].sort((a, b) => (a.endpointId ?? '').localeCompare(b.endpointId ?? ''));
  const first = sorted[0]!;
  return {
    webhookId: first.webhookId,
    endpointId: null,
    event: first.event,
    references: first.references,
    firstSeenAt: earliest(sorted.map((d) => d.firstSeenAt))!,
    status: sorted.map((d) => d.status).reduce((a, b) => (RANK[b] > RANK[a] ? b : a)),
    attempts: sorted.reduce((sum, d) => sum + d.attempts, 0),
    firstAttemptAt: earliest(sorted.map((d) => d.firstAttemptAt)),
    lastAttemptAt: last.lastAttemptAt,
    lastHttpStatus: last.lastHttpStatus,
    lastError: last.lastError,
    nextAttemptAt: earliest(sorted.map((d) => d.nextAttemptAt)),
    payload: sorted.find((d) => d.payload !== null)?.payload ?? null,
    deliveries: sorted.flatMap((d) => d.deliveries),
    // Each delivery's records in its own order, one delivery after another: the hosts' clocks cannot interleave them.
    records: sorted.flatMap((d) => d.records),
    duplicates: Math.max(...sorted.map((d) => d.duplicates)),
    lastDuplicateAt: latest(sorted.map((d) => d.lastDuplicateAt)),
  };
}

/** A webhook's detail on one endpoint only; undefined when it had no delivery there. */
export function onEndpoint(detail: WebhookDetail, endpointId: string | null): WebhookDetail | undefined {
  const delivery = detail.deliveries.find((d) => d.endpointId === endpointId);
  return delivery && { ...detail, ...delivery, deliveries: [delivery], records: detail.records.filter((r) => r.endpointId === endpointId) };
}
