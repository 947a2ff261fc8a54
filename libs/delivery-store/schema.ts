import type { Queryable, Session } from './database.js';
import { NamedError } from '../runtime/named-error.js';

/** The day partitions of the delivery log's records and of the intake keys (the tables are the migrations'). */

/** How many feed cursors one stream message spans (a message holds at most 200 records). */
export const SEQ_PER_OFFSET = 1024;

type PartitionedTable = 'delivery_records' | 'intake_keys';

const DAY_MS = 86_400_000;

/**
 * `db` with each statement in a transaction of its own that waits at most `wait` for a lock: making
 * or dropping a partition locks the whole table, and every read and write queues behind the wait.
 * Each statement alone, so that a race another program won does not abort the next.
 */
export function withLockWait(db: Pick<Session, 'transaction'>, wait: '200ms' | '1s'): Queryable {
  return {
    query: (text, params) => db.transaction(async (tx) => {
      await tx.query(`SET LOCAL lock_timeout = '${wait}'`);
      return tx.query(text, params);
    }),
  } as Queryable;
}

export function dayOf(time: string | Date): string {
  return new Date(time).toISOString().slice(0, 10);
}

/** A time no partition can be made for (beyond year 9999, before year 1). */
export class UnstorableTimeError extends NamedError {
  constructor(day: string) {
    super(`no day partition can hold ${day}`);
  }
}

export async function ensurePartition(db: Queryable, table: PartitionedTable, day: string): Promise<void> {
  const next = /^\d{4}-\d{2}-\d{2}$/.test(day) ? new Date(Date.parse(`${day}T00:00:00Z`) + DAY_MS).toISOString().slice(0, 10) : '';
  if (!/^\d{4}-\d{2}-\d{2}$/.test(next) || day < '0001-01-01') throw new UnstorableTimeError(day);
  await db.query(
    `CREATE TABLE IF NOT EXISTS ${table}_${day.replaceAll('-', '')} PARTITION OF ${table} FOR VALUES FROM ('${day}T00:00:00Z') TO ('${next}T00:00:00Z')`,
  );
}

/**
 * Makes the partitions of today and tomorrow (UTC, the database's clock) in the upkeep, ahead of
 * their first row, whose write would wait for the table's lock. Safe from several programs at once.
 */
export async function ensureDaysAhead(db: Queryable, table: PartitionedTable): Promise<number> {
  const { rows } = await db.query<{ now: Date }>('SELECT now() AS now');
  const now = new Date(rows[0]!.now).getTime();
  for (const day of [dayOf(new Date(now)), dayOf(new Date(now + DAY_MS))]) {
    try {
      await ensurePartition(db, table, day);
    } catch (err) {
      // Another program made it at the same moment (IF NOT EXISTS does not cover the race).
      if (!['42P07', '23505'].includes((err as { code?: string }).code ?? '')) throw err;
    }
  }
  return now;
}

/**
 * Drops the records' day partitions and the webhooks whose last record is past retention (in slices:
 * no long lock); returns the partitions dropped. `now` is PostgreSQL's unless given: a leader whose
 * clock ran ahead dropped a day of records and failures still inside retention.
 */
export async function dropExpiredPartitions(db: Queryable, retentionMs: number, now?: Date): Promise<string[]> {
  const at = now ?? new Date((await db.query<{ now: Date }>('SELECT now() AS now')).rows[0]!.now);
  const cutoff = at.getTime() - retentionMs;
  const dropped = await dropPartitionsEndedBy(db, 'delivery_records', cutoff);
  const before = new Date(cutoff).toISOString();
  // By the webhook's last record, not each delivery's, and all of a webhook's deliveries in one
  // slice: else a feed reader past the event would see it again at another delivery's place.
  await deleteInSlices(db, `DELETE FROM delivery_webhooks WHERE (merchant_id, webhook_id) IN (SELECT merchant_id, webhook_id FROM delivery_webhooks d
    WHERE last_record_at < $1::timestamptz
      AND NOT EXISTS (SELECT 1 FROM delivery_webhooks o WHERE o.merchant_id = d.merchant_id AND o.webhook_id = d.webhook_id AND o.last_record_at >= $1::timestamptz)
    LIMIT 10000)`, before);
  await deleteInSlices(db, 'DELETE FROM delivery_log_quarantine WHERE ctid = ANY (ARRAY(SELECT ctid FROM delivery_log_quarantine WHERE quarantined_at < $1::timestamptz LIMIT 10000))', before);
  // Failures as long as the log: a resend of one only the recorder indexed sends the log's copy.
  await deleteInSlices(db, 'DELETE FROM failed_webhooks WHERE ctid = ANY (ARRAY(SELECT ctid FROM failed_webhooks WHERE failed_at < $1::timestamptz LIMIT 10000))', before);
  return dropped;
}

/**
 * Runs `deleteSlice` (a DELETE of at most one slice of rows older than $1) until it deletes none:
 * no long lock, and no statement over a pile (the log off for months) runs past the statement timeout.
 */
async function deleteInSlices(db: Queryable, deleteSlice: string, before: string): Promise<void> {
  for (;;) {
    const { rows } = await db.query<{ n: number }>(`WITH gone AS (${deleteSlice} RETURNING 1) SELECT count(*)::integer AS n FROM gone`, [before]);
    if (!rows[0]?.n) return;
  }
}

/** Drops the table's day partitions whose day ended at or before `cutoff` (ms); returns their names. */
export async function dropPartitionsEndedBy(db: Queryable, table: PartitionedTable, cutoff: number): Promise<string[]> {
  const dropped: string[] = [];
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
  return dropped;
}
