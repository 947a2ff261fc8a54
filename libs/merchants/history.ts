import type { Queryable } from '../delivery-store/index.js';

/**
 * Where a program stands in the database's history: the cursor it reads changes from (the oldest
 * transaction still running, `pg_snapshot_xmin`), and what names the history itself. A cursor
 * alone is not enough: after a restore or the promotion of a lagging standby the transaction ids
 * go back, and the writes made since can carry them past the old cursor before the next poll, so
 * that changes are missed and an undone one stays held. What names the history changes with each
 * of those: the cluster (`system_identifier`: a dump restored into a new one), its timeline (a
 * point-in-time recovery, a promoted standby), the server's start (any physical restore restarts
 * it; so does a crash, which may lose asynchronous commits), the database and the merchants
 * table (a dump restored into a database or a table made anew). All of these any role may read,
 * and PGlite answers them too.
 */
export interface Position {
  cursor: string;
  history: string;
}

const POSITION = `SELECT pg_snapshot_xmin(pg_current_snapshot())::text AS cursor,
  concat_ws('/',
    (SELECT system_identifier FROM pg_control_system()),
    (SELECT timeline_id FROM pg_control_checkpoint()),
    pg_postmaster_start_time(),
    (SELECT oid FROM pg_database WHERE datname = current_database()),
    'merchants'::regclass::oid) AS history`;

export async function positionOf(db: Queryable): Promise<Position> {
  const { rows } = await db.query<Position>(POSITION);
  return rows[0]!;
}

/**
 * Why the program must load everything again rather than read what changed since `held`, or
 * undefined when reading the changes is enough.
 */
export function reloadReason(held: Position, now: Position): string | undefined {
  if (held.history !== now.history) return 'the database is another one, or restored, failed over or restarted';
  if (BigInt(now.cursor) < BigInt(held.cursor)) return 'transaction ids went back';
  return undefined;
}
