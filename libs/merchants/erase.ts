import type { Queryable } from '../delivery-store/index.js';
import { type Actor, recordAudit } from './audit.js';
import { CHANGES_CHANNEL, idDigest, TOMBSTONE_KEEP_MS } from './rows.js';

/**
 * Every table of the service's PostgreSQL that holds a merchant's data, and how that merchant's rows
 * are found in it. `webhooks merchants delete` removes them in one transaction; a test checks that
 * every table the programs make is either here or in TABLES_WITHOUT_MERCHANT_DATA, so a table added
 * later cannot be forgotten silently.
 */
export const MERCHANT_TABLES: ReadonlyArray<{ table: string; where: string }> = [
  { table: 'merchants', where: 'id = $1' },
  // Sealed answers of the admin API's Idempotency-Keys (a rotation's answer holds the new secret).
  { table: 'merchant_idempotency', where: 'merchant_id = $1' },
  // The endpoint's failing clock (auto-disable).
  { table: 'endpoint_health', where: 'merchant_id = $1' },
  // The endpoint's adaptive rate (lowered by its 429 and 503 answers).
  { table: 'endpoint_rates', where: 'merchant_id = $1' },
  // `<limit name>:<merchant id>`: the names hold no ':', a merchant id may.
  { table: 'rate_limits', where: "substring(key from position(':' in key) + 1) = $1" },
  { table: 'portal_links', where: 'merchant_id = $1' },
  { table: 'portal_sessions', where: 'merchant_id = $1' },
  { table: 'delivery_webhooks', where: 'merchant_id = $1' },
  // Partitioned by day: a delete on the parent reaches every partition.
  { table: 'delivery_records', where: 'merchant_id = $1' },
  { table: 'failed_webhooks', where: 'merchant_id = $1' },
  { table: 'webhook_waits', where: 'merchant_id = $1' },
  { table: 'webhook_bodies', where: 'merchant_id = $1' },
  // Its open circuit: the probe time of its parked waits (deleted with them).
  { table: 'wait_circuits', where: 'merchant_id = $1' },
  // Its webhooks' places in their references' order (order per reference), ended ones kept an hour.
  { table: 'webhook_order', where: 'merchant_id = $1' },
  { table: 'delivery_log_quarantine', where: 'merchant_id = $1' },
  // The keys of its upstream events (idempotent intake), partitioned by day like the records: they
  // expire by whole partitions; only a merchant's delete removes rows.
  { table: 'intake_keys', where: 'merchant_id = $1' },
];

/**
 * Tables that hold nothing of any merchant: the recorder's place in the deliveries stream, the
 * tombstones of deleted merchants (a digest of the id and a version, kept a day), and the
 * migrations applied.
 */
export const TABLES_WITHOUT_MERCHANT_DATA: readonly string[] = ['delivery_log_offsets', 'merchant_tombstones', 'schema_migrations'];

/**
 * Kept when a merchant is deleted: its audit trail (who changed what, when; never a secret: a
 * secret shows as "rotated", and the trail holds no payload), which the delete itself ends, so
 * that what happened to a merchant can still be answered after it is gone (docs/production.md).
 */
export const TABLES_KEPT_AFTER_DELETE: readonly string[] = ['merchant_audit'];

/**
 * Deletes every row of one merchant from every table above (all made by `webhooks migrate`; the
 * CLI checks the schema version first), in one transaction: all of it goes, or nothing; the audit
 * trail stays, with the delete recorded in it.
 * Returns the rows deleted per table. What RabbitMQ holds is not touched (see docs/production.md).
 */
export async function deleteMerchantData(db: { transaction<T>(work: (tx: Queryable) => Promise<T>): Promise<T> }, merchantId: string, by: Actor): Promise<Record<string, number>> {
  return db.transaction(async (tx) => {
    const deleted: Record<string, number> = {};
    // The merchant's row first: its lock orders this delete with a write of the merchant.
    const { rows: removed } = await tx.query<{ version: string }>('DELETE FROM merchants WHERE id = $1 RETURNING version', [merchantId]);
    deleted.merchants = removed.length;
    if (removed[0]) {
      // The tombstone by which every running program forgets the merchant (its poll reads it, a
      // notification or not), and from whose version a merchant made again with this id goes on.
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
    // The delete joins the trail it leaves, in the same transaction: who, and how many rows where.
    if (Object.values(deleted).some((n) => n > 0)) await recordAudit(tx, merchantId, 'merchant.deleted', { rowsDeleted: deleted }, by);
    await tx.query('SELECT pg_notify($1, $2)', [CHANGES_CHANNEL, merchantId]);
    return deleted;
  });
}
