import type { Queryable, Session } from './database.js';

/**
 * The delivery log's tables. Records are partitioned by day (their time), so
 * DELIVERY_LOG_RETENTION drops whole partitions; a record's id and time are the same on every copy
 * of it. A webhook is one row, keyed by merchant and webhook id, whatever happens to its messages:
 * a redelivered upstream message, or a copy handed back to `dispatch`, comes with another
 * first-seen time, and a row keyed by that time became a second row (issue 28). Webhooks expire by
 * their last record, so a webhook resent after the retention stays listed; quarantined records
 * after the retention too.
 *
 * `seq`, the feed's cursor, is derived from the deliveries stream's offset of the webhook's first
 * record (seq_base + offset * SEQ_PER_OFFSET + the record's place in its message + 1), never from a
 * sequence: rows a PostgreSQL crash or a failover takes back are stored again from the stream with
 * the same seq, so a cursor already handed out never skips them. seq_base moves past every seq when
 * the stream is deleted and its offsets start over.
 */
export const SCHEMA = `
CREATE TABLE IF NOT EXISTS delivery_log_offsets (
  stream text PRIMARY KEY,
  next_offset bigint NOT NULL,
  -- When the stream ended where the log now holds everything (null: not measured yet).
  caught_up_at timestamptz,
  seq_base bigint NOT NULL DEFAULT 0,
  -- The fingerprint of the entry at next_offset - 1: another one there means the stream was
  -- deleted, declared again and written past that offset meanwhile.
  last_entry text
);

CREATE TABLE IF NOT EXISTS delivery_webhooks (
  merchant_id text NOT NULL,
  webhook_id text NOT NULL,
  first_seen_at timestamptz NOT NULL,
  seq bigint NOT NULL,
  event text NOT NULL,
  refs text[] NOT NULL,
  -- merchant id, unit separator, reference: one GIN lookup finds a merchant's reference (a GIN
  -- on refs alone would match every merchant's, then filter).
  merchant_refs text[] NOT NULL,
  payload jsonb,
  status text NOT NULL,
  attempts integer NOT NULL,
  first_attempt_at timestamptz,
  last_attempt_at timestamptz,
  last_http_status integer,
  last_error text,
  next_attempt_at timestamptz,
  last_record_at timestamptz NOT NULL,
  PRIMARY KEY (merchant_id, webhook_id)
);
CREATE INDEX IF NOT EXISTS delivery_webhooks_newest ON delivery_webhooks (merchant_id, first_seen_at DESC, webhook_id DESC);
CREATE INDEX IF NOT EXISTS delivery_webhooks_feed ON delivery_webhooks (merchant_id, seq);
CREATE INDEX IF NOT EXISTS delivery_webhooks_expiry ON delivery_webhooks (last_record_at);
-- fastupdate off: with it, every reference search read the whole pending list (60,000 entries:
-- p50 1.6 -> 4.9 ms), and a row holds one or two keys, so inserting straight into the index costs
-- the recorder nothing measurable.
CREATE INDEX IF NOT EXISTS delivery_webhooks_refs ON delivery_webhooks USING gin (merchant_refs) WITH (fastupdate = off);
-- Waits (libs/waits): a webhook that waits for its next attempt is one row, the only copy that
-- decides; the scheduler picks due rows by pick_at (the due time, then the end of a hand-back's
-- lease) with SKIP LOCKED, and \`hand\` (times handed back or rewritten) lets only the current
-- hand-back take, rewrite or end it. Its bytes are stored once per webhook, as received.
CREATE TABLE IF NOT EXISTS webhook_waits (
  merchant_id text NOT NULL,
  webhook_id text NOT NULL,
  endpoint_id text NOT NULL DEFAULT '',
  attempt integer NOT NULL,
  due_at timestamptz NOT NULL,
  reason text NOT NULL,
  headers jsonb NOT NULL,
  hand integer NOT NULL DEFAULT 0,
  pick_at timestamptz,
  PRIMARY KEY (merchant_id, webhook_id, endpoint_id)
);
CREATE INDEX IF NOT EXISTS webhook_waits_pick ON webhook_waits (pick_at) WHERE pick_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS webhook_waits_due ON webhook_waits (merchant_id, due_at);
CREATE TABLE IF NOT EXISTS webhook_bodies (
  merchant_id text NOT NULL,
  webhook_id text NOT NULL,
  content bytea NOT NULL,
  PRIMARY KEY (merchant_id, webhook_id)
);
CREATE TABLE IF NOT EXISTS delivery_records (
  id uuid NOT NULL,
  at timestamptz NOT NULL,
  merchant_id text NOT NULL,
  webhook_id text NOT NULL,
  outcome text NOT NULL,
  attempt_number integer NOT NULL,
  started_at timestamptz,
  duration_ms integer,
  http_status integer,
  error text,
  response_body text,
  reason text,
  next_attempt_at timestamptz,
  PRIMARY KEY (id, at)
) PARTITION BY RANGE (at);
CREATE INDEX IF NOT EXISTS delivery_records_webhook ON delivery_records (merchant_id, webhook_id, at);
-- Records PostgreSQL refused (a value it cannot hold, a size over its limits): set aside with
-- where they were in the stream, so that the rest of the log keeps flowing and operators see them.
CREATE TABLE IF NOT EXISTS delivery_log_quarantine (
  stream text NOT NULL,
  stream_offset bigint NOT NULL,
  -- The record's place in its stream message (-1: the whole message).
  position integer NOT NULL,
  quarantined_at timestamptz NOT NULL DEFAULT now(),
  merchant_id text,
  webhook_id text,
  error text NOT NULL,
  -- The record as JSON text (NUL removed), or the message's first bytes when it was not records.
  content text NOT NULL,
  PRIMARY KEY (stream, stream_offset, position)
);
-- The list's status and event filters, in its order: a page reads its rows and stops, where the
-- merchant's newest-first index alone read every row of the merchant to find the few that match.
CREATE INDEX IF NOT EXISTS delivery_webhooks_status ON delivery_webhooks (merchant_id, status, first_seen_at DESC, webhook_id DESC);
CREATE INDEX IF NOT EXISTS delivery_webhooks_event ON delivery_webhooks (merchant_id, event, first_seen_at DESC, webhook_id DESC);
-- The failure index (libs/failed/store.ts): one row per failed webhook, and its resend's claim.
CREATE TABLE IF NOT EXISTS failed_webhooks (
  merchant_id text NOT NULL,
  webhook_id text NOT NULL,
  failed_at timestamptz NOT NULL,
  event text NOT NULL,
  -- merchant id, unit separator, reference: as delivery_webhooks.merchant_refs.
  merchant_refs text[] NOT NULL,
  reason text,
  attempts integer NOT NULL DEFAULT 0,
  last_status integer,
  last_error text,
  -- The failed message's body and headers; null when only the recorder wrote the row (the
  -- dispatcher could not reach the database): a resend then sends the log's copy of the payload.
  content text,
  headers jsonb,
  claim_id uuid,
  claimed_at timestamptz,
  resent_at timestamptz,
  -- Resends of this webhook in the 24 hours from resends_since, whatever failures came between:
  -- a merchant cannot turn one webhook into a stream of signed POSTs.
  resends integer NOT NULL DEFAULT 0,
  resends_since timestamptz,
  PRIMARY KEY (merchant_id, webhook_id)
);
CREATE INDEX IF NOT EXISTS failed_webhooks_refs ON failed_webhooks USING gin (merchant_refs) WITH (fastupdate = off);
CREATE INDEX IF NOT EXISTS failed_webhooks_open ON failed_webhooks (merchant_id, failed_at) WHERE resent_at IS NULL;
CREATE INDEX IF NOT EXISTS failed_webhooks_expiry ON failed_webhooks (failed_at);
`;

/** SCHEMA's statements, their comment lines left out (a comment may hold a semicolon). */
const STATEMENTS = SCHEMA.split(/;\s*$/m)
  .map((chunk) => chunk.split('\n').filter((line) => !line.trim().startsWith('--')).join('\n').trim())
  .filter(Boolean);

/** How many feed cursors one stream message spans: its records' places (a message holds at most 200). */
export const SEQ_PER_OFFSET = 1024;

export const PARTITIONED_TABLES = ['delivery_records'] as const;

export async function ensureSchema(session: Pick<Session, 'transaction'>): Promise<void> {
  await session.transaction(async (tx) => {
    // Serialised: two programs starting at once on an empty database must not race on CREATE.
    await tx.query('SELECT pg_advisory_xact_lock(hashtext($1))', ['webhooks-delivery-log-schema']);
    const legacy = await webhooksByDay(tx);
    if (legacy) await tx.query('ALTER TABLE delivery_webhooks RENAME TO delivery_webhooks_by_day');
    for (const statement of STATEMENTS) {
      // The old table's indexes hold these names until it is dropped below.
      if (legacy && /^CREATE INDEX IF NOT EXISTS delivery_webhooks_/.test(statement)) continue;
      await tx.query(statement);
    }
    await upgradeOffsets(tx);
    if (legacy) {
      await moveWebhooksByDay(tx);
      for (const statement of STATEMENTS.filter((s) => /^CREATE INDEX IF NOT EXISTS delivery_webhooks_/.test(s))) await tx.query(statement);
    }
  });
}

/**
 * The offsets table of a database made before issue 28: no seq_base, and a caught_up_at that was
 * always set. Altered only when so, since ALTER TABLE locks out every reader of the table.
 */
async function upgradeOffsets(db: Queryable): Promise<void> {
  const { rows } = await db.query<{ name: string; notnull: boolean }>(
    `SELECT attname AS name, attnotnull AS notnull FROM pg_attribute WHERE attrelid = 'delivery_log_offsets'::regclass AND attnum > 0 AND NOT attisdropped`,
  );
  if (!rows.some((r) => r.name === 'seq_base')) await db.query('ALTER TABLE delivery_log_offsets ADD COLUMN seq_base bigint NOT NULL DEFAULT 0');
  if (!rows.some((r) => r.name === 'last_entry')) await db.query('ALTER TABLE delivery_log_offsets ADD COLUMN last_entry text');
  if (rows.some((r) => r.name === 'caught_up_at' && r.notnull)) {
    await db.query('ALTER TABLE delivery_log_offsets ALTER COLUMN caught_up_at DROP NOT NULL, ALTER COLUMN caught_up_at DROP DEFAULT');
  }
}

/** A database made before issue 28 holds webhooks partitioned by their first-seen day. */
async function webhooksByDay(db: Queryable): Promise<boolean> {
  const { rows } = await db.query<{ kind: string }>(`SELECT relkind::text AS kind FROM pg_class WHERE relname = 'delivery_webhooks' AND relkind IN ('p', 'r')`);
  return rows[0]?.kind === 'p';
}

/**
 * One row per webhook from the rows per first-seen time: attempts added up, the earliest
 * first-seen and feed position kept, the rest from the row with the latest record. New seq values
 * start past the old ones (the sequence they came from is dropped).
 */
async function moveWebhooksByDay(db: Queryable): Promise<void> {
  await db.query(`
    INSERT INTO delivery_webhooks (merchant_id, webhook_id, first_seen_at, seq, event, refs, merchant_refs, payload, status, attempts,
      first_attempt_at, last_attempt_at, last_http_status, last_error, next_attempt_at, last_record_at)
    SELECT DISTINCT ON (merchant_id, webhook_id) merchant_id, webhook_id,
      min(first_seen_at) OVER w, min(seq) OVER w, event, refs, merchant_refs, coalesce(payload, first_value(payload) OVER w), status,
      (sum(attempts) OVER w)::integer, min(first_attempt_at) OVER w, max(last_attempt_at) OVER w, last_http_status, last_error,
      next_attempt_at, last_record_at
    FROM delivery_webhooks_by_day
    WINDOW w AS (PARTITION BY merchant_id, webhook_id)
    ORDER BY merchant_id, webhook_id, last_record_at DESC`);
  await db.query(`UPDATE delivery_log_offsets SET seq_base = (SELECT coalesce(max(seq), 0) + 1 FROM delivery_webhooks_by_day)`);
  await db.query('DROP TABLE delivery_webhooks_by_day');
  await db.query('DROP SEQUENCE IF EXISTS delivery_feed_seq');
}

const DAY_MS = 86_400_000;

export function dayOf(time: string | Date): string {
  return new Date(time).toISOString().slice(0, 10);
}

function partitionName(table: string, day: string): string {
  return `${table}_${day.replaceAll('-', '')}`;
}

/** A time PostgreSQL's partitions cannot be made for (beyond year 9999, before year 1). */
export class UnstorableTimeError extends Error {
  constructor(day: string) {
    super(`no day partition can hold ${day}`);
    this.name = 'UnstorableTimeError';
  }
}

/** Creates the day's partition of records if it is missing. */
export async function ensurePartition(db: Queryable, table: (typeof PARTITIONED_TABLES)[number], day: string): Promise<void> {
  const next = /^\d{4}-\d{2}-\d{2}$/.test(day) ? new Date(Date.parse(`${day}T00:00:00Z`) + DAY_MS).toISOString().slice(0, 10) : '';
  if (!/^\d{4}-\d{2}-\d{2}$/.test(next) || day < '0001-01-01') throw new UnstorableTimeError(day);
  await db.query(
    `CREATE TABLE IF NOT EXISTS ${partitionName(table, day)} PARTITION OF ${table} FOR VALUES FROM ('${day}T00:00:00Z') TO ('${next}T00:00:00Z')`,
  );
}

/**
 * Drops every day partition of records that ended before now − retention, and the webhooks whose
 * last record is older than that (in slices, so no long lock); returns what it dropped.
 */
export async function dropExpiredPartitions(db: Queryable, retentionMs: number, now = new Date()): Promise<string[]> {
  const cutoff = now.getTime() - retentionMs;
  const dropped: string[] = [];
  for (const table of PARTITIONED_TABLES) {
    const { rows } = await db.query<{ name: string }>(
      `SELECT c.relname AS name FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_class p ON p.oid = i.inhparent WHERE p.relname = $1`,
      [table],
    );
    for (const { name } of rows) {
      const match = /_(\d{4})(\d{2})(\d{2})$/.exec(name);
      if (!match) continue;
      const end = Date.parse(`${match[1]}-${match[2]}-${match[3]}T00:00:00Z`) + DAY_MS;
      if (end <= cutoff) {
        await db.query(`DROP TABLE IF EXISTS ${name}`);
        dropped.push(name);
      }
    }
  }
  const before = new Date(cutoff).toISOString();
  for (;;) {
    const { rows } = await db.query<{ n: number }>(
      `WITH gone AS (DELETE FROM delivery_webhooks WHERE ctid IN (SELECT ctid FROM delivery_webhooks WHERE last_record_at < $1::timestamptz LIMIT 10000) RETURNING 1)
       SELECT count(*)::integer AS n FROM gone`,
      [before],
    );
    if (!rows[0]?.n) break;
  }
  await db.query('DELETE FROM delivery_log_quarantine WHERE quarantined_at < $1::timestamptz', [before]);
  // Failures as long as the log: a resend of one only the recorder indexed sends the log's copy.
  await db.query('DELETE FROM failed_webhooks WHERE failed_at < $1::timestamptz', [before]);
  return dropped;
}
