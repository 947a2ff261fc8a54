import type { Outcome, WebhookStatus } from '../delivery-log/index.js';

/** A record as a detail's statement aggregates it (json_agg): its times are PostgreSQL's ISO text. */
interface RecordRow {
  at: string;
  outcome: Outcome;
  attemptNumber: number;
  startedAt: string | null;
  durationMs: number | null;
  httpStatus: number | null;
  error: string | null;
  responseBody: string | null;
  reason: string | null;
  nextAttemptAt: string | null;
}

/** A row of delivery_webhooks as the list, the detail and the feed select it. */
export interface WebhookRow {
  webhook_id: string;
  endpoint_id: string;
  event: string;
  refs: string[];
  status: WebhookStatus;
  attempts: number;
  first_seen_at: Date;
  first_attempt_at: Date | null;
  last_attempt_at: Date | null;
  last_http_status: number | null;
  last_error: string | null;
  next_attempt_at: Date | null;
  seq: string;
  payload?: string | null;
  records?: RecordRow[];
  duplicates?: number | null;
  last_duplicate_at?: Date | null;
  /** The feed's: folded over the event's deliveries. */
  event_status?: WebhookStatus;
  /** A detail's: its last attempt's position in the deliveries stream (null before 0019). */
  last_attempt_position?: string | null;
}

const iso = (d: Date | string | null) => (d === null ? null : new Date(d).toISOString());

/** The body the log stored as text, answered as JSON; one that is not JSON (never a dispatcher's) as its text. */
export function bodyOf(text: string | null | undefined): unknown {
  if (text === null || text === undefined) return null;
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return text;
  }
}

/** A list's item: one delivery (the webhook on one endpoint); a webhook's detail folds its deliveries. */
export function summary(row: WebhookRow) {
  return {
    webhookId: row.webhook_id,
    // Null on deliveries recorded before endpoints, and on a webhook none of its endpoints took (skipped).
    endpointId: row.endpoint_id === '' ? null : row.endpoint_id,
    event: row.event,
    references: row.refs,
    status: row.status,
    attempts: row.attempts,
    firstSeenAt: iso(row.first_seen_at)!,
    firstAttemptAt: iso(row.first_attempt_at),
    lastAttemptAt: iso(row.last_attempt_at),
    lastHttpStatus: row.last_http_status,
    lastError: row.last_error,
    nextAttemptAt: iso(row.next_attempt_at),
  };
}

export type WebhookSummary = ReturnType<typeof summary>;

export function detail(row: WebhookRow) {
  const webhook = summary(row);
  const { webhookId: _id, event: _event, references: _references, firstSeenAt: _seen, ...delivery } = webhook;
  return {
    ...webhook,
    payload: bodyOf(row.payload),
    deliveries: [delivery],
    // json_agg's times are PostgreSQL's ISO text (microseconds, its time zone), not yet the API's.
    records: (row.records ?? []).map((r) => ({ endpointId: delivery.endpointId, ...r, at: iso(r.at)!, startedAt: iso(r.startedAt), nextAttemptAt: iso(r.nextAttemptAt) })),
    // Repeats of its intake key acked without delivery (INTAKE_DEDUPE_WINDOW), while the key is kept;
    // and the last one's time.
    duplicates: row.duplicates ?? 0,
    lastDuplicateAt: iso(row.last_duplicate_at ?? null),
  };
}

export type WebhookDetail = ReturnType<typeof detail>;

export interface WebhookFilters {
  reference?: string;
  endpointId?: string;
  event?: string;
  status?: string;
  since?: string;
  until?: string;
  cursor?: string;
  limit: number;
}

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
