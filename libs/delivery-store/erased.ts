/**
 * SQL that is true when the merchant `id` (an SQL expression) was deleted: a tombstone names it (by
 * libs/merchants/rows.ts idDigest) and no merchant of that id exists again; with `at` (an SQL time),
 * also when that time is not after the delete. A write guarded by it keeps a deleted merchant's work
 * still in flight from writing its rows back.
 */
export function erasedMerchantSql(id: string, at?: string): string {
  const after = at === undefined ? '' : `${at} <= t.deleted_at OR `;
  // The first EXISTS names no row (run once per statement): with no tombstone, no row's id is digested.
  return `(EXISTS (SELECT 1 FROM merchant_tombstones) AND EXISTS (SELECT 1 FROM merchant_tombstones t
    WHERE t.id_digest = translate(rtrim(encode(sha256(convert_to(${id}, 'UTF8')), 'base64'), '='), '+/', '-_')
      AND (${after}NOT EXISTS (SELECT 1 FROM merchants m WHERE m.id = ${id}))))`;
}
