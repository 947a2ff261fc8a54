import { type DeliveryRecord, type RefusedEntry, statusOf } from '../delivery-log/index.js';
import type { Queryable } from './database.js';
import { erasedMerchantSql } from './erased.js';
import { dayOf, ensurePartition } from './schema.js';

/**
 * One statement stores a batch: records inserted once each (a copy published twice has the same id
 * and time), and each delivery's row (the webhook on one endpoint, '' before endpoints) updated from
 * the new records only. Its status, next attempt and last error follow the record that comes last
 * in the webhook's own order, whatever the batches' order or the hosts' clocks: the record's key
 * (resend, attempt number, rank: a retry, then a wait, then an end; its place in the stream). Its
 * feed position (seq) and first-seen time are fixed by its first record.
 */
const STORE_BATCH = `
WITH stored_offset AS (
  -- In the same statement, so the records and the offset commit together or not at all.
  INSERT INTO delivery_log_offsets AS o (stream, next_offset, caught_up_at, last_entry) VALUES ($1, $2, $3::timestamptz, $24)
  ON CONFLICT (stream) DO UPDATE SET next_offset = EXCLUDED.next_offset, last_entry = coalesce(EXCLUDED.last_entry, o.last_entry),
    caught_up_at = coalesce(greatest(o.caught_up_at, EXCLUDED.caught_up_at), o.caught_up_at, EXCLUDED.caught_up_at)
), base AS (
  SELECT coalesce((SELECT seq_base FROM delivery_log_offsets WHERE stream = $1), 0) AS seq_base
), input AS (
  -- One array per column, zipped by ROWS FROM: cheaper than jsonb_to_recordset. Payloads stay text, as received.
  SELECT DISTINCT ON (id, at) id, at, merchant_id, webhook_id, endpoint_id, first_seen_at, event, refs::text[] AS refs,
    payload, outcome, status, attempt_number, started_at, duration_ms, http_status, error,
    response_body, reason, next_attempt_at, ord, pos,
    ARRAY[resend, attempt_number, CASE outcome WHEN 'retrying' THEN 0 WHEN 'deferred' THEN 1 WHEN 'postponed' THEN 1 ELSE 2 END,
      (SELECT seq_base FROM base) + pos]::bigint[] AS key
  FROM ROWS FROM (unnest($4::uuid[]), unnest($5::timestamptz[]), unnest($6::text[]), unnest($7::text[]),
    unnest($8::timestamptz[]), unnest($9::text[]), unnest($10::text[]), unnest($11::text[]), unnest($12::text[]),
    unnest($13::text[]), unnest($14::integer[]), unnest($15::timestamptz[]), unnest($16::integer[]), unnest($17::integer[]),
    unnest($18::text[]), unnest($19::text[]), unnest($20::text[]), unnest($21::timestamptz[]), unnest($22::integer[]), unnest($23::bigint[]),
    unnest($25::integer[]), unnest($26::text[]))
  AS r(id, at, merchant_id, webhook_id, first_seen_at, event, refs, payload, outcome, status, attempt_number, started_at,
    duration_ms, http_status, error, response_body, reason, next_attempt_at, ord, pos, resend, endpoint_id)
  -- A deleted merchant's records read after its delete begin no log again.
  WHERE NOT ${erasedMerchantSql('r.merchant_id', 'r.at')}
  ORDER BY id, at, ord
), inserted AS (
  INSERT INTO delivery_records (id, at, merchant_id, webhook_id, endpoint_id, outcome, attempt_number, started_at, duration_ms,
    http_status, error, response_body, reason, next_attempt_at, key)
  SELECT id, at, merchant_id, webhook_id, endpoint_id, outcome, attempt_number, started_at, duration_ms, http_status, error,
    response_body, reason, next_attempt_at, key FROM input
  ON CONFLICT DO NOTHING
  RETURNING id, at
), fresh AS (
  -- IN over a hashed subquery, not a join: the planner would nest loops over two CTEs (quadratic).
  SELECT * FROM input WHERE (id, at) IN (SELECT id, at FROM inserted)
), per_webhook AS (
  SELECT merchant_id, webhook_id, endpoint_id,
    -- Its first record's: a later one may carry another clock's, and the list's cursor pages by it.
    (array_agg(first_seen_at ORDER BY ord))[1] AS first_seen_at,
    min(ord) AS first_ord,
    -- From 1: the feed reads after cursor 0 when given none.
    (SELECT seq_base FROM base) + min(pos) + 1 AS seq,
    min(event) AS event,
    min(refs) AS refs,
    min(at) AS first_record_at,
    max(at) AS last_record_at,
    max(key) AS last_key,
    (array_agg(status ORDER BY key DESC))[1] AS status,
    (array_agg(next_attempt_at ORDER BY key DESC))[1] AS next_attempt_at,
    count(started_at)::integer AS attempts,
    min(started_at) AS first_attempt_at,
    max(started_at) AS last_attempt_at,
    -- The last attempt in the delivery's order, not by its host's clock.
    max(key) FILTER (WHERE started_at IS NOT NULL) AS last_attempt_key,
    (array_agg(http_status ORDER BY key DESC) FILTER (WHERE started_at IS NOT NULL))[1] AS last_http_status,
    (array_agg(coalesce(error, reason) ORDER BY key DESC) FILTER (WHERE error IS NOT NULL OR reason IS NOT NULL))[1] AS last_error,
    (array_agg(payload ORDER BY ord) FILTER (WHERE payload IS NOT NULL))[1] AS payload
  FROM fresh GROUP BY merchant_id, webhook_id, endpoint_id
)
INSERT INTO delivery_webhooks AS w (merchant_id, webhook_id, endpoint_id, first_seen_at, seq, event, refs, merchant_refs, payload, status, attempts,
  first_attempt_at, last_attempt_at, last_http_status, last_error, next_attempt_at, first_record_at, last_record_at, last_key, last_attempt_key)
SELECT merchant_id, webhook_id, endpoint_id, first_seen_at, seq, event, refs, ARRAY(SELECT merchant_id || chr(31) || r FROM unnest(refs) AS r), payload, status, attempts,
  first_attempt_at, last_attempt_at, last_http_status, last_error, next_attempt_at, first_record_at, last_record_at, last_key, last_attempt_key
FROM per_webhook
ORDER BY first_ord
ON CONFLICT (merchant_id, webhook_id, endpoint_id) DO UPDATE SET
  -- first_seen_at and seq stay the first record's: moved, the delivery would come again on a later page.
  attempts = w.attempts + EXCLUDED.attempts,
  payload = coalesce(w.payload, EXCLUDED.payload),
  first_attempt_at = least(w.first_attempt_at, EXCLUDED.first_attempt_at),
  last_attempt_at = greatest(w.last_attempt_at, EXCLUDED.last_attempt_at),
  -- A row written before 0019 has no key: the next attempt stored is taken as its last.
  last_http_status = CASE WHEN EXCLUDED.last_attempt_key > coalesce(w.last_attempt_key, '{}') THEN EXCLUDED.last_http_status ELSE w.last_http_status END,
  last_attempt_key = greatest(w.last_attempt_key, EXCLUDED.last_attempt_key),
  last_error = CASE WHEN EXCLUDED.last_key > w.last_key THEN coalesce(EXCLUDED.last_error, w.last_error) ELSE w.last_error END,
  status = CASE WHEN EXCLUDED.last_key > w.last_key THEN EXCLUDED.status ELSE w.status END,
  next_attempt_at = CASE WHEN EXCLUDED.last_key > w.last_key THEN EXCLUDED.next_attempt_at ELSE w.next_attempt_at END,
  last_key = greatest(w.last_key, EXCLUDED.last_key),
  -- A row written before 0019 has none: its records were read from first_seen_at, and still are.
  first_record_at = least(coalesce(w.first_record_at, w.first_seen_at), EXCLUDED.first_record_at),
  last_record_at = greatest(w.last_record_at, EXCLUDED.last_record_at)
`;

// PostgreSQL text and jsonb cannot hold NUL: dropped, so one odd record never stops the recorder.
const noNul = (text: string) => text.replaceAll('\u0000', '');

/** An element of an array literal: quoted, so any text is taken as it is (commas, braces, spaces, "NULL"). */
const quoted = (text: string) => `"${/[\\"]/.test(text) ? text.replace(/[\\"]/g, '\\$&') : text}"`;
const textOrNull = (text: string | undefined) => (text === undefined ? 'NULL' : quoted(noNul(text)));
const literal = (values: ReadonlyArray<string | number>) => `{${values.join(',')}}`;

/** A validated time in UTC names its day in its first ten characters, without a Date. */
const utcDay = (time: string) => (time.endsWith('Z') ? time.slice(0, 10) : dayOf(time));

/** Partitions known to exist, per session. */
const known = new WeakMap<Queryable, Set<string>>();

export async function ensurePartitionsFor(session: Queryable, records: readonly DeliveryRecord[]): Promise<void> {
  const seen = known.get(session) ?? new Set<string>();
  known.set(session, seen);
  for (const day of new Set(records.map((r) => utcDay(r.at)))) {
    if (seen.has(day)) continue;
    await ensurePartition(session, 'delivery_records', day);
    seen.add(day);
  }
}

/** Retention dropped some. */
export function forgetPartitions(session: Queryable): void {
  known.delete(session);
}

/** A batch ready to store: the statement's parameters after the stream's, one array literal per column. */
type PreparedRows = readonly string[];

/** The columns, in the statement's order: $4 to $23, then (after the stream's fingerprint, $24) $25 and $26. */
const COLUMNS: ReadonlyArray<(r: DeliveryRecord, i: number, positions: readonly number[]) => string | number> = [
  (r) => r.id,
  (r) => r.at,
  (r) => quoted(noNul(r.merchantId)),
  (r) => quoted(noNul(r.webhookId)),
  (r) => r.firstSeenAt,
  (r) => quoted(noNul(r.event)),
  (r) => quoted(literal(r.references.map((ref) => quoted(noNul(ref))))),
  (r) => textOrNull(r.payload),
  (r) => r.outcome,
  (r) => statusOf(r.outcome),
  (r) => r.attemptNumber,
  (r) => r.attempt?.startedAt ?? 'NULL',
  (r) => r.attempt?.durationMs ?? 'NULL',
  (r) => r.attempt?.httpStatus ?? 'NULL',
  (r) => textOrNull(r.attempt?.error),
  (r) => textOrNull(r.attempt?.responseBody),
  (r) => textOrNull(r.reason),
  (r) => r.nextAttemptAt ?? 'NULL',
  (_, i) => i,
  (_, i, positions) => positions[i] ?? 0,
  (r) => r.resend ?? 0,
  (r) => quoted(noNul(r.endpointId ?? '')),
];

/** The validated values as they are; payloads as the text the dispatcher sent (a NUL removed). */
export function prepareRows(records: readonly DeliveryRecord[], positions: readonly number[] = []): PreparedRows {
  return COLUMNS.map((column) => literal(records.map((r, i) => column(r, i, positions))));
}

/** Stores rows and moves the offset in one statement; `caughtUpAt`: the log holds all appended until then (null leaves it). */
export async function storeBatch(db: Queryable, stream: string, rows: PreparedRows, nextOffset: number, caughtUpAt: Date | null, lastEntry: string | null = null): Promise<void> {
  await db.query(STORE_BATCH, [stream, nextOffset, caughtUpAt?.toISOString() ?? null, ...rows.slice(0, -2), lastEntry, ...rows.slice(-2)]);
}

/** The deliveries stream was declared again: its offsets start over at 0, feed positions past every one given out. */
export async function restartStream(db: Queryable, stream: string): Promise<void> {
  await db.query(
    `INSERT INTO delivery_log_offsets (stream, next_offset, seq_base) VALUES ($1, 0, (SELECT coalesce(max(seq), 0) + 1 FROM delivery_webhooks))
     ON CONFLICT (stream) DO UPDATE SET next_offset = 0, seq_base = EXCLUDED.seq_base, last_entry = NULL`,
    [stream],
  );
}

/** A record (or a message that held none) set aside, with where it was in the stream. */
export interface Quarantined extends RefusedEntry {
  offset: number;
  merchantId?: string;
  webhookId?: string;
}

export async function quarantine(db: Queryable, stream: string, entry: Quarantined): Promise<void> {
  await db.query(
    // Not a deleted merchant's record (its content is the whole record, payload included).
    `INSERT INTO delivery_log_quarantine (stream, stream_offset, position, merchant_id, webhook_id, error, content)
     SELECT $1::text, $2::bigint, $3::integer, $4::text, $5::text, $6::text, $7::text WHERE NOT ${erasedMerchantSql('$4::text')} ON CONFLICT DO NOTHING`,
    [stream, entry.offset, entry.position, entry.merchantId ?? null, entry.webhookId ?? null, entry.error.slice(0, 2000), noNul(entry.content)],
  );
}

/**
 * The next offset to read, the fingerprint of the entry before it (null before this was kept), and
 * when the stream last ended where the log held everything (undefined before that was measured).
 */
export async function storedPlace(
  db: Queryable,
  stream: string,
): Promise<{ nextOffset: number; lastEntry: string | null; caughtUpAt?: Date } | undefined> {
  const { rows } = await db.query<{ next_offset: string; last_entry: string | null; caught_up_at: Date | null }>(
    'SELECT next_offset, last_entry, caught_up_at FROM delivery_log_offsets WHERE stream = $1',
    [stream],
  );
  const row = rows[0];
  const caughtUpAt = row?.caught_up_at ? new Date(row.caught_up_at) : undefined;
  return row && { nextOffset: Number(row.next_offset), lastEntry: row.last_entry, caughtUpAt };
}
