import type { Queryable, Session } from './database.js';

/**
 * The delivery log's tables. Both are partitioned by day (records by their time, webhooks by when
 * the event was first seen), so DELIVERY_LOG_RETENTION drops whole partitions instead of deleting
 * rows. Unique keys include the partition key, as PostgreSQL requires; a record's id and time, and
 * a webhook's first-seen time, are the same on every copy of it.
 */
export const SCHEMA = `
CREATE TABLE IF NOT EXISTS delivery_log_offsets (
  stream text PRIMARY KEY,
  next_offset bigint NOT NULL,
  caught_up_at timestamptz NOT NULL DEFAULT now()
);
CREATE SEQUENCE IF NOT EXISTS delivery_feed_seq;
CREATE TABLE IF NOT EXISTS delivery_webhooks (
  merchant_id text NOT NULL,
  webhook_id text NOT NULL,
  first_seen_at timestamptz NOT NULL,
  seq bigint NOT NULL DEFAULT nextval('delivery_feed_seq'),
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
  PRIMARY KEY (merchant_id, webhook_id, first_seen_at)
) PARTITION BY RANGE (first_seen_at);
CREATE INDEX IF NOT EXISTS delivery_webhooks_newest ON delivery_webhooks (merchant_id, first_seen_at DESC, webhook_id DESC);
CREATE INDEX IF NOT EXISTS delivery_webhooks_feed ON delivery_webhooks (merchant_id, seq);
-- fastupdate off: with it, every reference search read the whole pending list of the day being
-- written (60,000 entries: p50 1.6 -> 4.9 ms), and a row holds one or two keys, so inserting
-- straight into the index costs the recorder nothing measurable.
CREATE INDEX IF NOT EXISTS delivery_webhooks_refs ON delivery_webhooks USING gin (merchant_refs) WITH (fastupdate = off);
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
-- The list's status and event filters, in its order: a page reads its rows and stops, where the
-- merchant's newest-first index alone read every row of the merchant to find the few that match.
CREATE INDEX IF NOT EXISTS delivery_webhooks_status ON delivery_webhooks (merchant_id, status, first_seen_at DESC, webhook_id DESC);
CREATE INDEX IF NOT EXISTS delivery_webhooks_event ON delivery_webhooks (merchant_id, event, first_seen_at DESC, webhook_id DESC);
`;

export const PARTITIONED_TABLES = ['delivery_webhooks', 'delivery_records'] as const;

export async function ensureSchema(session: Session): Promise<void> {
  await session.transaction(async (tx) => {
    // Serialised: two programs starting at once on an empty database must not race on CREATE.
    await tx.query('SELECT pg_advisory_xact_lock(hashtext($1))', ['webhooks-delivery-log-schema']);
    for (const statement of SCHEMA.split(';').map((s) => s.trim()).filter(Boolean)) await tx.query(statement);
    await referencesWithoutPendingList(tx);
  });
}

/**
 * A database made before the references' GIN index had fastupdate off keeps the parent index as
 * it was (PostgreSQL cannot alter a partitioned index's options), so each day's index is set
 * here, and again for each new day. A metadata change; what is pending is merged by VACUUM.
 */
async function referencesWithoutPendingList(db: Queryable): Promise<void> {
  const { rows } = await db.query<{ name: string }>(
    `SELECT c.relname AS name FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_class p ON p.oid = i.inhparent
     WHERE p.relname = 'delivery_webhooks_refs' AND NOT coalesce(c.reloptions @> ARRAY['fastupdate=off'], false)`,
  );
  for (const { name } of rows) await db.query(`ALTER INDEX ${quoteIdent(name)} SET (fastupdate = off)`);
}

function quoteIdent(name: string): string {
  return `"${name.replaceAll('"', '""')}"`;
}

const DAY_MS = 86_400_000;

export function dayOf(time: string | Date): string {
  return new Date(time).toISOString().slice(0, 10);
}

function partitionName(table: string, day: string): string {
  return `${table}_${day.replaceAll('-', '')}`;
}

/** Creates the day's partition of each table if it is missing. */
export async function ensurePartition(db: Queryable, table: (typeof PARTITIONED_TABLES)[number], day: string): Promise<void> {
  if (!/^\d{4}-\d{2}-\d{2}$/.test(day)) throw new Error(`not a day: ${day}`);
  const next = new Date(Date.parse(`${day}T00:00:00Z`) + DAY_MS).toISOString().slice(0, 10);
  await db.query(
    `CREATE TABLE IF NOT EXISTS ${partitionName(table, day)} PARTITION OF ${table} FOR VALUES FROM ('${day}T00:00:00Z') TO ('${next}T00:00:00Z')`,
  );
  if (table === 'delivery_webhooks') await referencesWithoutPendingList(db);
}

/** Drops every day partition that ended before now − retention; returns what it dropped. */
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
  return dropped;
}
