import type { Queryable } from '../delivery-store/index.js';
import { NamedError } from '../runtime/named-error.js';
import { type Actor, recordAudit } from './audit.js';
import { CHANGES_CHANNEL, idDigest, TOMBSTONE_KEEP_MS } from './rows.js';

/** Every table that holds a merchant's data (a test checks that none is forgotten). */
export const MERCHANT_TABLES: ReadonlyArray<{ table: string; where: string }> = [
  { table: 'merchants', where: 'id = $1' },
  { table: 'merchant_idempotency', where: 'merchant_id = $1' },
  { table: 'endpoint_health', where: 'merchant_id = $1' },
  { table: 'endpoint_rates', where: 'merchant_id = $1' },
  // `<limit name>:<merchant id>`, and the throttle's `<name>:<merchant id>\u001f<endpoint id>` per endpoint:
  // the names hold no ':', a merchant id may; neither id holds \u001f, so `m_1` never takes `m_10`'s rows.
  { table: 'rate_limits', where: "substring(key from position(':' in key) + 1) = $1 OR starts_with(substring(key from position(':' in key) + 1), $1 || chr(31))" },
  { table: 'portal_links', where: 'merchant_id = $1' },
  { table: 'portal_sessions', where: 'merchant_id = $1' },
  { table: 'delivery_webhooks', where: 'merchant_id = $1' },
  // Partitioned by day: a delete on the parent reaches every partition.
  { table: 'delivery_records', where: 'merchant_id = $1' },
  { table: 'failed_webhooks', where: 'merchant_id = $1' },
  { table: 'webhook_waits', where: 'merchant_id = $1' },
  { table: 'webhook_bodies', where: 'merchant_id = $1' },
  { table: 'wait_circuits', where: 'merchant_id = $1' },
  { table: 'webhook_order', where: 'merchant_id = $1' },
  { table: 'delivery_log_quarantine', where: 'merchant_id = $1' },
  // Partitioned by day too; they expire by whole partitions, only a merchant's delete removes rows.
  { table: 'intake_keys', where: 'merchant_id = $1' },
];

/** Tables that hold nothing of any merchant (a tombstone keeps a digest of the id, not the id). */
export const TABLES_WITHOUT_MERCHANT_DATA: readonly string[] = ['delivery_log_offsets', 'merchant_tombstones', 'schema_migrations'];

/** Kept when a merchant is deleted: what happened to it can be answered after it is gone. */
export const TABLES_KEPT_AFTER_DELETE: readonly string[] = ['merchant_audit'];

/** A write whose snapshot predates the tombstone may commit after the delete passed its table: not this long after. */
export const SWEEP_AFTER_MS = 2_000;

type Transactional = { transaction<T>(work: (tx: Queryable) => Promise<T>): Promise<T> };

/** The delete committed (`deleted`: its rows per table), its sweep did not (`cause`): a second delete sweeps what raced it. */
export class MerchantSweepFailedError extends NamedError {
  constructor(readonly deleted: Record<string, number>, options: { cause: unknown }) {
    super(`the merchant's delete committed, its sweep failed: ${(options.cause as Error)?.message ?? String(options.cause)}`, options);
  }
}

/**
 * In one transaction, audited; when it found any, once more after `sweepAfterMs`. RabbitMQ is not touched.
 * A failed sweep throws MerchantSweepFailedError with the committed counts: the caller can say the delete happened.
 */
export async function deleteMerchantData(db: Transactional, merchantId: string, by: Actor, options: { sweepAfterMs?: number } = {}): Promise<Record<string, number>> {
  const deleted = await deleteOnce(db, merchantId, by);
  if (!Object.values(deleted).some((n) => n > 0)) return deleted;
  await new Promise((resolve) => setTimeout(resolve, options.sweepAfterMs ?? SWEEP_AFTER_MS));
  const swept = await deleteOnce(db, merchantId, by, true).catch((err: unknown) => {
    throw new MerchantSweepFailedError(deleted, { cause: err });
  });
  for (const [table, n] of Object.entries(swept)) deleted[table] = (deleted[table] ?? 0) + n;
  return deleted;
}

async function deleteOnce(db: Transactional, merchantId: string, by: Actor, sweep = false): Promise<Record<string, number>> {
  return db.transaction(async (tx) => {
    const deleted: Record<string, number> = {};
    if (sweep) {
      // Made again meanwhile (its creation locks the tombstone too): the new merchant's rows stay.
      await tx.query('SELECT 1 FROM merchant_tombstones WHERE id_digest = $1 FOR UPDATE', [idDigest(merchantId)]);
      const { rows: again } = await tx.query('SELECT 1 FROM merchants WHERE id = $1', [merchantId]);
      if (again.length > 0) return deleted;
    }
    // The merchant's row first: its lock orders this delete with a write of the merchant.
    const { rows: removed } = await tx.query<{ version: string }>('DELETE FROM merchants WHERE id = $1 RETURNING version', [merchantId]);
    deleted.merchants = removed.length;
    if (removed[0]) {
      await tx.query(
        `INSERT INTO merchant_tombstones (id_digest, version) VALUES ($1, $2)
         ON CONFLICT (id_digest) DO UPDATE SET version = EXCLUDED.version, change_xid = pg_current_xact_id(), deleted_at = now()`,
        [idDigest(merchantId), removed[0].version],
      );
    }
    await tx.query(`DELETE FROM merchant_tombstones WHERE deleted_at < now() - $1::bigint * interval '1 millisecond'`, [TOMBSTONE_KEEP_MS]);
    for (const { table, where } of MERCHANT_TABLES.slice(1)) {
      const gone = await tx.query<{ n: number }>(`WITH gone AS (DELETE FROM ${table} WHERE ${where} RETURNING 1) SELECT count(*)::integer AS n FROM gone`, [merchantId]);
      deleted[table] = gone.rows[0]?.n ?? 0;
    }
    if (Object.values(deleted).some((n) => n > 0)) await recordAudit(tx, merchantId, 'merchant.deleted', { rowsDeleted: deleted }, by);
    await tx.query('SELECT pg_notify($1, $2)', [CHANGES_CHANNEL, merchantId]);
    return deleted;
  });
}
