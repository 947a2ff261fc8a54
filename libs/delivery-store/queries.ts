import type { Outcome, WebhookStatus } from '../delivery-log/index.js';
import type { Queryable } from './database.js';
import { InvalidCursorError, LogUnavailableError } from './errors.js';
import type { DeliveryLogQueries, FeedEvent, RecordView, WebhookDetail, WebhookFilters, WebhookSummary } from './views.js';

interface WebhookRow {
  webhook_id: string;
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
  payload?: unknown;
}

const iso = (d: Date | string | null) => (d === null ? null : new Date(d).toISOString());

const SUMMARY_COLUMNS =
  'webhook_id, event, refs, status, attempts, first_seen_at, first_attempt_at, last_attempt_at, last_http_status, last_error, next_attempt_at, seq';

function summary(row: WebhookRow): WebhookSummary {
  return {
    webhookId: row.webhook_id,
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

/** The list's cursor: the last row's (first_seen_at, webhook_id), newest first, opaque to clients. */
function encodeCursor(row: WebhookRow): string {
  return Buffer.from(JSON.stringify([new Date(row.first_seen_at).toISOString(), row.webhook_id])).toString('base64url');
}

function decodeCursor(cursor: string): [string, string] {
  try {
    const value = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8')) as unknown;
    if (Array.isArray(value) && value.length === 2 && typeof value[1] === 'string' && !Number.isNaN(Date.parse(String(value[0])))) {
      return [String(value[0]), value[1]];
    }
  } catch {
    // falls through to the error
  }
  throw new InvalidCursorError();
}

/** Any failure of the database is an outage to the caller (503): the queries themselves are fixed. */
async function run<R>(db: Queryable, text: string, params: unknown[]): Promise<R[]> {
  try {
    return (await db.query<R>(text, params)).rows;
  } catch (err) {
    throw new LogUnavailableError(err);
  }
}

/** The API's and the CLI's reads of the delivery log; every one is scoped to one merchant. */
export function deliveryLogQueries(db: Queryable): DeliveryLogQueries {
  return {
    async listWebhooks(merchantId: string, filters: WebhookFilters) {
      const where = ['merchant_id = $1'];
      const params: unknown[] = [merchantId];
      const add = (clause: (n: string) => string, value: unknown) => {
        params.push(value);
        where.push(clause(`$${params.length}`));
      };
      if (filters.reference) add((n) => `merchant_refs @> ARRAY[$1 || chr(31) || ${n}::text]`, filters.reference);
      if (filters.event) add((n) => `event = ${n}`, filters.event);
      if (filters.status) add((n) => `status = ${n}`, filters.status);
      if (filters.since) add((n) => `first_seen_at >= ${n}::timestamptz`, filters.since);
      if (filters.until) add((n) => `first_seen_at < ${n}::timestamptz`, filters.until);
      if (filters.cursor) {
        const [seenAt, webhookId] = decodeCursor(filters.cursor);
        params.push(seenAt, webhookId);
        where.push(`(first_seen_at, webhook_id) < ($${params.length - 1}::timestamptz, $${params.length})`);
      }
      params.push(filters.limit + 1);
      const rows = await run<WebhookRow>(
        db,
        `SELECT ${SUMMARY_COLUMNS} FROM delivery_webhooks WHERE ${where.join(' AND ')}
         ORDER BY first_seen_at DESC, webhook_id DESC LIMIT $${params.length}`,
        params,
      );
      const page = rows.slice(0, filters.limit);
      return { webhooks: page.map(summary), nextCursor: rows.length > filters.limit ? encodeCursor(page.at(-1)!) : null };
    },

    async getWebhook(merchantId: string, webhookId: string): Promise<WebhookDetail | undefined> {
      const rows = await run<WebhookRow>(
        db,
        `SELECT ${SUMMARY_COLUMNS}, payload FROM delivery_webhooks WHERE merchant_id = $1 AND webhook_id = $2
         ORDER BY first_seen_at LIMIT 1`,
        [merchantId, webhookId],
      );
      const row = rows[0];
      if (!row) return undefined;
      const records = await run<{
        at: Date;
        outcome: Outcome;
        attempt_number: number;
        started_at: Date | null;
        duration_ms: number | null;
        http_status: number | null;
        error: string | null;
        response_body: string | null;
        reason: string | null;
        next_attempt_at: Date | null;
      }>(
        db,
        `SELECT at, outcome, attempt_number, started_at, duration_ms, http_status, error, response_body, reason, next_attempt_at
         FROM delivery_records WHERE merchant_id = $1 AND webhook_id = $2 AND at >= $3::timestamptz ORDER BY at, attempt_number`,
        [merchantId, webhookId, new Date(row.first_seen_at).toISOString()],
      );
      return {
        ...summary(row),
        payload: row.payload ?? null,
        records: records.map(
          (r): RecordView => ({
            at: iso(r.at)!,
            outcome: r.outcome,
            attemptNumber: r.attempt_number,
            startedAt: iso(r.started_at),
            durationMs: r.duration_ms,
            httpStatus: r.http_status,
            error: r.error,
            responseBody: r.response_body,
            reason: r.reason,
            nextAttemptAt: iso(r.next_attempt_at),
          }),
        ),
      };
    },

    async feed(merchantId: string, after: string | undefined, limit: number) {
      const rows = await run<WebhookRow>(
        db,
        `SELECT ${SUMMARY_COLUMNS}, payload FROM delivery_webhooks WHERE merchant_id = $1 AND seq > $2::bigint ORDER BY seq LIMIT $3`,
        [merchantId, after ?? '0', limit],
      );
      const events = rows.map(
        (row): FeedEvent => ({
          cursor: String(row.seq),
          webhookId: row.webhook_id,
          event: row.event,
          references: row.refs,
          firstSeenAt: iso(row.first_seen_at)!,
          status: row.status,
          payload: row.payload ?? null,
        }),
      );
      return { events, nextCursor: events.at(-1)?.cursor ?? after ?? '0' };
    },
  };
}
