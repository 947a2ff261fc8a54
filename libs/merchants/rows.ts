import type { Queryable } from '../delivery-store/index.js';
import { AUDIT_INDEX, AUDIT_TABLE } from './audit.js';
import type { Merchant, MerchantWebhook } from './schema.js';
import type { SecretBox } from './secret-box.js';

/**
 * The merchants' tables. A merchant is one row: its settings as JSON without the secrets, the
 * secrets sealed apart (SecretBox), a version that counts its changes (compare-and-set, the admin
 * API's ETag) and the id of the transaction that last changed it (`change_xid`), by which every
 * program's cache finds what changed since it last looked. The limits shared by API replicas and
 * the admin writes' Idempotency-Keys live beside them.
 */
const STATEMENTS = [
  `CREATE TABLE IF NOT EXISTS merchants (
    id text PRIMARY KEY,
    public_key text NOT NULL UNIQUE,
    webhook jsonb,
    secrets text,
    version bigint NOT NULL,
    change_xid xid8 NOT NULL DEFAULT pg_current_xact_id(),
    updated_at timestamptz NOT NULL DEFAULT now()
  )`,
  'CREATE INDEX IF NOT EXISTS merchants_changes ON merchants (change_xid)',
  `CREATE TABLE IF NOT EXISTS merchant_idempotency (
    key text PRIMARY KEY,
    fingerprint text NOT NULL,
    result text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    merchant_id text
  )`,
  'CREATE INDEX IF NOT EXISTS merchant_idempotency_age ON merchant_idempotency (created_at)',
  `CREATE TABLE IF NOT EXISTS rate_limits (
    key text PRIMARY KEY,
    tat timestamptz NOT NULL
  )`,
  // The sweep of rows whose bucket is full again (rate-limit.ts) finds them by tat, not by reading every row.
  'CREATE INDEX IF NOT EXISTS rate_limits_tat ON rate_limits (tat)',
  AUDIT_TABLE,
  AUDIT_INDEX,
];

/** The channel a write notifies on commit; its payload is the merchant id. */
export const CHANGES_CHANNEL = 'webhooks_merchants';

/** Made by whichever program starts first; serialised, so two starting at once do not race on CREATE. */
export async function ensureMerchantTables(db: { transaction<T>(work: (tx: Queryable) => Promise<T>): Promise<T> }): Promise<void> {
  await db.transaction(async (tx) => {
    await tx.query('SELECT pg_advisory_xact_lock(hashtext($1))', ['webhooks-merchants-schema']);
    for (const statement of STATEMENTS) await tx.query(statement);
    await addIdempotencyMerchant(tx);
  });
}

/**
 * merchant_idempotency of a database made before its rows named their merchant (so that
 * `webhooks merchants delete` finds them): the column added, nullable, which a program of the
 * version before ignores. Altered only when missing, since ALTER TABLE locks out every writer.
 */
async function addIdempotencyMerchant(db: Queryable): Promise<void> {
  const { rows } = await db.query(
    `SELECT 1 FROM pg_attribute WHERE attrelid = 'merchant_idempotency'::regclass AND attname = 'merchant_id' AND NOT attisdropped`,
  );
  if (rows.length === 0) await db.query('ALTER TABLE merchant_idempotency ADD COLUMN merchant_id text');
}

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
