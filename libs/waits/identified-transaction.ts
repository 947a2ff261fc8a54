import type { Database, Queryable } from '../delivery-store/index.js';
import { isDataRefusal } from '../delivery-store/refusals.js';

/** `unsure` is told the id of a transaction that failed otherwise than by a refused row: it may have committed. */
export async function inIdentifiedTransaction<T>(db: Pick<Database, 'transaction'>, work: (tx: Queryable) => Promise<T>, unsure: (xid: string) => void): Promise<T> {
  let xid: string | undefined;
  try {
    return await db.transaction(async (tx) => {
      xid = (await tx.query<{ xid: string }>('SELECT pg_current_xact_id()::text AS xid')).rows[0]!.xid;
      return work(tx);
    });
  } catch (err) {
    if (xid !== undefined && !isDataRefusal(err)) unsure(xid);
    throw err;
  }
}

/** Those of these transactions that committed; throws while one is still in progress (its backend not yet aware). */
export async function committedOf(db: Pick<Database, 'query'>, xids: readonly string[]): Promise<Set<string>> {
  const { rows } = await db.query<{ xid: string; status: string | null }>('SELECT x AS xid, pg_xact_status(x::xid8) AS status FROM unnest($1::text[]) AS x', [xids]);
  if (rows.some((row) => row.status === 'in progress')) throw new Error('an earlier try of this batch of waits is still in progress; tried again');
  return new Set(rows.filter((row) => row.status === 'committed').map((row) => row.xid));
}
