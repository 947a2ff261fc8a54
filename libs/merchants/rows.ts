import type { Queryable } from '../delivery-store/index.js';
import type { Merchant, MerchantWebhook } from './schema.js';
import type { SecretBox } from './secret-box.js';

/**
 * A merchant is one row of `merchants` (libs/migrations/sql): its settings as JSON without the
 * secrets, the secrets sealed apart (SecretBox), a version that counts its changes (compare-and-set,
 * the admin API's ETag) and the id of the transaction that last changed it (`change_xid`), by which
 * every program's cache finds what changed since it last looked. A write notifies this channel on
 * commit; its payload is the merchant id.
 */
export const CHANGES_CHANNEL = 'webhooks_merchants';

export const MERCHANT_COLUMNS = 'id, public_key, webhook, secrets, version';

export interface MerchantRow {
  id: string;
  public_key: string;
  webhook: Omit<MerchantWebhook, 'secret' | 'previousSecrets'> | null;
  secrets: string | null;
  version: string | number;
}

/** What is sealed: the secrets, and nothing else of the webhook. */
interface Secrets {
  secret: string;
  previousSecrets?: MerchantWebhook['previousSecrets'];
}

export function merchantOf(row: MerchantRow, box: SecretBox): Merchant {
  if (!row.webhook || !row.secrets) return { id: row.id, publicKey: row.public_key };
  const secrets = JSON.parse(box.open(row.secrets, row.id)) as Secrets;
  return { id: row.id, publicKey: row.public_key, webhook: { ...row.webhook, ...secrets } as MerchantWebhook };
}

/** The row's columns for a merchant: [public_key, webhook, secrets]. */
export function columnsOf(merchant: Merchant, box: SecretBox): [string, string | null, string | null] {
  if (!merchant.webhook) return [merchant.publicKey, null, null];
  const { secret, previousSecrets, ...settings } = merchant.webhook;
  const sealed = box.seal(JSON.stringify(previousSecrets?.length ? { secret, previousSecrets } : { secret }), merchant.id);
  return [merchant.publicKey, JSON.stringify(settings), sealed];
}

/**
 * After SECRETS_KEY changed (the old key in SECRETS_KEY_PREVIOUS): seals again with the new key
 * every stored secret the old one sealed, a row at a time and only if the row still holds what
 * was read (a write meanwhile sealed it anew). Settings and versions are untouched: every program
 * already holds the secrets in the clear, so nothing is announced. Returns how many were sealed again.
 */
export async function resealSecrets(db: Queryable, box: SecretBox): Promise<number> {
  let count = 0;
  const merchants = await db.query<{ id: string; secrets: string }>('SELECT id, secrets FROM merchants WHERE secrets IS NOT NULL');
  for (const row of merchants.rows.filter((r) => !box.isCurrent(r.secrets))) {
    const { rows } = await db.query('UPDATE merchants SET secrets = $2 WHERE id = $1 AND secrets = $3 RETURNING id', [row.id, box.seal(box.open(row.secrets, row.id), row.id), row.secrets]);
    count += rows.length;
  }
  const kept = await db.query<{ key: string; result: string }>('SELECT key, result FROM merchant_idempotency');
  for (const row of kept.rows.filter((r) => !box.isCurrent(r.result))) {
    const { rows } = await db.query('UPDATE merchant_idempotency SET result = $2 WHERE key = $1 AND result = $3 RETURNING key', [row.key, box.seal(box.open(row.result, row.key), row.key), row.result]);
    count += rows.length;
  }
  return count;
}
