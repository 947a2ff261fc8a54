/**
 * SQL that is true when the merchant `id` (an SQL expression) was deleted (`webhooks merchants
 * delete`): a tombstone names it, by the digest libs/merchants/rows.ts idDigest makes (SHA-256,
 * base64url), and no merchant of that id exists again. With `at` (an SQL time), also when that time
 * is not after the delete: a record of an attempt made before it, read late. A write of the
 * merchant's data made in the same statement is left out by it, so that work of a deleted merchant
 * still in flight (a program that has not heard of the delete yet) does not write its rows back.
 */
export function erasedMerchantSql(id: string, at?: string): string {
  const after = at === undefined ? '' : `${at} <= t.deleted_at OR `;
  // The first EXISTS names no row (run once per statement): with no tombstone, no row's id is digested.
  return `(EXISTS (SELECT 1 FROM merchant_tombstones) AND EXISTS (SELECT 1 FROM merchant_tombstones t
    WHERE t.id_digest = translate(rtrim(encode(sha256(convert_to(${id}, 'UTF8')), 'base64'), '='), '+/', '-_')
      AND (${after}NOT EXISTS (SELECT 1 FROM merchants m WHERE m.id = ${id}))))`;
}
