import { z } from 'zod';
import type { Queryable } from './database.js';
import { isTimeout } from './refusals.js';
import { NamedError } from '../runtime/named-error.js';
import { bodyOf, detail, foldDeliveries, summary, type WebhookFilters, type WebhookRow } from './views.js';

/** What PostgreSQL can hold, checked first: a value it refuses would read as an outage (503). */
const EARLIEST = Date.parse('0001-01-01T00:00:00Z');
const LATEST = Date.parse('9999-12-31T23:59:59.999Z');

/** A time as the API takes it (ISO 8601 with an offset) whose instant lies in years 1 to 9999. */
export function isStorableTime(text: string): boolean {
  if (!/^\d{4}-\d{2}-\d{2}T/.test(text)) return false;
  const at = Date.parse(text);
  return !Number.isNaN(at) && at >= EARLIEST && at <= LATEST;
}

/** A feed cursor as digits that fit a bigint. */
export function isStorableFeedCursor(text: string): boolean {
  return /^\d{1,19}$/.test(text) && BigInt(text) <= 9_223_372_036_854_775_807n;
}

/** Text PostgreSQL can store: it refuses NUL in text (SQLSTATE 22021). */
export function isStorableText(text: string): boolean {
  return !text.includes('\u0000');
}

/** PostgreSQL could not be reached or answered with a connection-level error: queries answer 503. */
export class LogUnavailableError extends NamedError {
  constructor(cause: unknown) {
    super(`delivery log database unavailable: ${(cause as Error)?.message ?? String(cause)}`, { cause });
  }
}

/** A read cancelled by the statement timeout (57014): still a 503, but a narrower read may avoid it. */
export class LogQueryTimeoutError extends LogUnavailableError {}

export class InvalidCursorError extends NamedError {
  constructor() {
    super('The cursor is not one this service gave; pass nextCursor from the previous page');
  }
}

/** A filter holding a value PostgreSQL cannot take: the request is wrong (400, never 503). */
export class InvalidFilterError extends NamedError {
  constructor(readonly parameter: string, reason: string) {
    super(`The ${parameter} parameter is not valid: ${reason}`);
  }
}

const SUMMARY_COLUMNS =
  'webhook_id, endpoint_id, event, refs, status, attempts, first_seen_at, first_attempt_at, last_attempt_at, last_http_status, last_error, next_attempt_at, seq';

/** The rows `webhooks` selects, each with every record: their time range skips the other days' partitions. */
const withRecords = (webhooks: string) => `
SELECT ${SUMMARY_COLUMNS}, payload, last_attempt_key[4] AS last_attempt_position, (
  SELECT coalesce(json_agg(json_build_object('at', r.at, 'outcome', r.outcome, 'attemptNumber', r.attempt_number,
      'startedAt', r.started_at, 'durationMs', r.duration_ms, 'httpStatus', r.http_status, 'error', r.error,
      'responseBody', r.response_body, 'reason', r.reason, 'nextAttemptAt', r.next_attempt_at)
      -- The delivery's own order, never a host's clock; records stored before 0021 have no key: first, by time.
      ORDER BY r.key NULLS FIRST, r.at, r.attempt_number), '[]')
  FROM delivery_records r
  WHERE r.merchant_id = w.merchant_id AND r.webhook_id = w.webhook_id AND r.endpoint_id = w.endpoint_id
    -- From the earliest record's time, not first_seen_at: another host's clock, which may be ahead of the records'.
    AND r.at >= coalesce(w.first_record_at, w.first_seen_at) AND r.at <= w.last_record_at
) AS records, k.duplicates, k.last_duplicate_at
FROM (${webhooks}) w
LEFT JOIN LATERAL (
  SELECT duplicates, last_duplicate_at FROM intake_keys k WHERE k.merchant_id = w.merchant_id AND k.webhook_id = w.webhook_id ORDER BY day DESC LIMIT 1
) k ON true
ORDER BY first_seen_at DESC, webhook_id DESC, endpoint_id DESC`;

const DETAIL_COLUMNS = `merchant_id, ${SUMMARY_COLUMNS}, payload, first_record_at, last_record_at, last_attempt_key`;

/** The list's cursor: the last row's (first_seen_at, webhook_id, endpoint_id), opaque to clients. */
function encodeCursor(row: WebhookRow): string {
  return Buffer.from(JSON.stringify([new Date(row.first_seen_at).toISOString(), row.webhook_id, row.endpoint_id])).toString('base64url');
}

const cursorSchema = z.tuple([z.string().refine(isStorableTime), z.string().refine(isStorableText), z.string().refine(isStorableText)]);

function decodeCursor(cursor: string): [string, string, string] {
  try {
    return cursorSchema.parse(JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8')));
  } catch {
    throw new InvalidCursorError();
  }
}

/**
 * Any failure of the database is an outage to the caller (503), except a data exception (class
 * 22), which only a parameter can cause: the backstop for a value the filter checks missed.
 */
async function run<R>(db: Queryable, text: string, params: unknown[]): Promise<R[]> {
  try {
    return (await db.query<R>(text, params)).rows;
  } catch (err) {
    const code = (err as { code?: unknown })?.code;
    if (typeof code === 'string' && code.startsWith('22')) throw new InvalidFilterError('query', 'PostgreSQL cannot hold one of its values');
    if (isTimeout(err)) throw new LogQueryTimeoutError(err);
    throw new LogUnavailableError(err);
  }
}

/**
 * The list's statement selecting `columns` (in `wrap`), newest first, one row more than the page; a
 * filter PostgreSQL cannot hold is refused first (a 400). A reference is looked up in the GIN alone,
 * in a materialised CTE: else the planner would also read the merchant's B-tree in every partition.
 */
function listStatement(merchantId: string, filters: WebhookFilters, columns: string, wrap = (text: string) => text): { text: string; params: unknown[] } {
  for (const name of ['since', 'until'] as const) {
    const value = filters[name];
    if (value !== undefined && !isStorableTime(value)) throw new InvalidFilterError(name, 'give an ISO 8601 time in the years 0001 to 9999');
  }
  for (const name of ['reference', 'event', 'status', 'endpointId'] as const) {
    const value = filters[name];
    if (value !== undefined && !isStorableText(value)) throw new InvalidFilterError(name, 'it holds a NUL character');
  }
  const params: unknown[] = [merchantId];
  const param = (value: unknown) => `$${params.push(value)}`;
  const where = ['merchant_id = $1'];
  let from = 'delivery_webhooks';
  if (filters.reference) {
    from = `(WITH matched AS MATERIALIZED (SELECT * FROM delivery_webhooks WHERE merchant_refs @> ARRAY[$1 || chr(31) || ${param(filters.reference)}::text])
      SELECT * FROM matched) delivery_webhooks`;
  }
  if (filters.event) where.push(`event = ${param(filters.event)}`);
  if (filters.status) where.push(`status = ${param(filters.status)}`);
  if (filters.endpointId) where.push(`endpoint_id = ${param(filters.endpointId)}`);
  if (filters.since) where.push(`first_seen_at >= ${param(filters.since)}::timestamptz`);
  if (filters.until) where.push(`first_seen_at < ${param(filters.until)}::timestamptz`);
  if (filters.cursor) {
    const [seenAt, webhookId, endpointId] = decodeCursor(filters.cursor);
    where.push(`(first_seen_at, webhook_id, endpoint_id) < (${param(seenAt)}::timestamptz, ${param(webhookId)}, ${param(endpointId)})`);
  }
  const order = `ORDER BY first_seen_at DESC, webhook_id DESC, endpoint_id DESC LIMIT ${param(filters.limit + 1)}`;
  return { text: wrap(`SELECT ${columns} FROM ${from} WHERE ${where.join(' AND ')} ${order}`), params };
}

async function page<T>(db: Queryable, { text, params }: { text: string; params: unknown[] }, limit: number, view: (row: WebhookRow) => T): Promise<{ webhooks: T[]; nextCursor: string | null }> {
  const rows = await run<WebhookRow>(db, text, params);
  const shown = rows.slice(0, limit);
  return { webhooks: shown.map(view), nextCursor: rows.length > limit ? encodeCursor(shown.at(-1)!) : null };
}

/** The most payload bytes a feed page carries, whatever its limit: 500 events of 256 KB would be 128 MB. */
export const FEED_PAGE_BYTES = 4 * 1024 * 1024;

/**
 * The feed's page: up to `limit` events after the cursor, cut where their payloads' running total
 * passes the budget; the first event is kept whatever its size, so a page always moves the cursor on.
 */
const FEED_STATEMENT = `
SELECT ${SUMMARY_COLUMNS}, payload, (
  -- The event's status over its deliveries, as foldDeliveries ranks them.
  SELECT CASE WHEN bool_or(e.status = 'retrying') THEN 'retrying' WHEN bool_or(e.status = 'failed') THEN 'failed'
    WHEN bool_or(e.status = 'delivered') THEN 'delivered' ELSE 'skipped' END
  FROM delivery_webhooks e WHERE e.merchant_id = counted.merchant_id AND e.webhook_id = counted.webhook_id
) AS event_status FROM (
  SELECT page.*, row_number() OVER running AS n, sum(coalesce(octet_length(payload), 0)) OVER running AS bytes
  FROM (
    -- One entry per event: its first delivery recorded (the lowest seq), so its place never moves.
    SELECT merchant_id, ${SUMMARY_COLUMNS}, payload FROM delivery_webhooks d WHERE merchant_id = $1 AND seq > $2::bigint
      AND NOT EXISTS (SELECT 1 FROM delivery_webhooks o WHERE o.merchant_id = d.merchant_id AND o.webhook_id = d.webhook_id AND o.seq < d.seq)
    ORDER BY seq LIMIT $3
  ) page
  WINDOW running AS (ORDER BY seq ROWS UNBOUNDED PRECEDING)
) counted
WHERE n = 1 OR bytes <= $4
ORDER BY seq`;

export type DeliveryLogQueries = ReturnType<typeof deliveryLogQueries>;

/** The API's and the CLI's reads of the delivery log; every one is scoped to one merchant. */
export function deliveryLogQueries(db: Queryable, options: { feedPageBytes?: number } = {}) {
  const feedPageBytes = options.feedPageBytes ?? FEED_PAGE_BYTES;
  return {
    async listWebhooks(merchantId: string, filters: WebhookFilters) {
      return page(db, listStatement(merchantId, filters, SUMMARY_COLUMNS), filters.limit, summary);
    },

    /** The list's webhooks each with its payload and every record. */
    async listWebhookDetails(merchantId: string, filters: WebhookFilters) {
      return page(db, listStatement(merchantId, filters, DETAIL_COLUMNS, withRecords), filters.limit, detail);
    },

    async getWebhook(merchantId: string, webhookId: string) {
      if (!isStorableText(webhookId)) throw new InvalidFilterError('webhookId', 'it holds a NUL character');
      const rows = await run<WebhookRow>(
        db,
        withRecords(`SELECT ${DETAIL_COLUMNS} FROM delivery_webhooks WHERE merchant_id = $1 AND webhook_id = $2`),
        [merchantId, webhookId],
      );
      const positions = rows.map((row) => (row.last_attempt_position === null || row.last_attempt_position === undefined ? null : Number(row.last_attempt_position)));
      return rows.length === 0 ? undefined : foldDeliveries(rows.map(detail), positions);
    },

    async feed(merchantId: string, after: string | undefined, limit: number) {
      if (after !== undefined && !isStorableFeedCursor(after)) throw new InvalidCursorError();
      const rows = await run<WebhookRow>(db, FEED_STATEMENT, [merchantId, after ?? '0', limit, feedPageBytes]);
      const events = rows.map((row) => {
        const { webhookId, event, references, firstSeenAt } = summary(row);
        return { cursor: String(row.seq), webhookId, event, references, firstSeenAt, status: row.event_status ?? row.status, payload: bodyOf(row.payload) };
      });
      return { events, nextCursor: events.at(-1)?.cursor ?? after ?? '0' };
    },
  };
}
