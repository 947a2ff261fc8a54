import { createHash } from 'node:crypto';
import type { Queryable } from '../delivery-store/index.js';
import type { Merchant, MerchantWebhook } from './schema.js';
import type { SecretBox } from './secret-box.js';

/**
 * A merchant is one row of `merchants` (libs/migrations/sql): its settings as JSON without the
 * secrets, the secrets sealed apart (SecretBox), a version that counts its changes (compare-and-set,
 * the admin API's ETag) and the id of the transaction that last changed it (`change_xid`), by which
 * every program's cache finds what changed since it last looked. A deleted merchant leaves a
 * tombstone for a day (`merchant_tombstones`: a digest of its id, its last version), by which the
 * programs forget it and a merchant created again with that id goes on from that version. The
 * endpoints' failing clocks are in `endpoint_health` (health.ts), outside the version.
 */
/** How long a deleted merchant's tombstone is kept: a program that has not polled for half of it loads everything again. */
export const TOMBSTONE_KEEP_MS = 24 * 3_600_000;

/** What a tombstone keeps of the merchant's id: its digest, so that no row names a deleted merchant. */
export function idDigest(merchantId: string): string {
  return createHash('sha256').update(merchantId, 'utf8').digest('base64url');
}

/** The channel a write notifies on commit (a merchant, a tombstone, an endpoint's health); its payload is the merchant id. */
export const CHANGES_CHANNEL = 'webhooks_merchants';

export const MERCHANT_COLUMNS = 'id, public_key, webhook, secrets, version';

/** The webhook's settings in clear: everything but the secrets' values (a grace secret's expiry is no secret). */
type ClearWebhook = Omit<MerchantWebhook, 'secret' | 'previousSecrets' | 'failingSince' | 'lastFailureAt'> & { previousSecrets?: Array<{ expiresAt: string }> };

export interface MerchantRow {
  id: string;
  public_key: string;
  webhook: ClearWebhook | null;
  secrets: string | null;
  version: string | number;
}

/** What is sealed: the secrets' values, and nothing else (the previous ones in the order of the clear expiries). */
interface Secrets {
  secret: string;
  previous?: string[];
}

/**
 * The merchant a row holds. `open: false` opens no secret now: `secret` and each grace secret's
 * `secret` are opened on first read (and kept), so a program that never signs (the API) never
 * decrypts one; every other field is there at once.
 */
export function merchantOf(row: MerchantRow, box: SecretBox, open = true): Merchant {
  if (!row.webhook || !row.secrets) return { id: row.id, publicKey: row.public_key };
  const { previousSecrets: expiries, ...settings } = row.webhook;
  const sealed = row.secrets;
  if (open) {
    const { secret, previous } = JSON.parse(box.open(sealed, row.id)) as Secrets;
    const grace = expiries?.map(({ expiresAt }, i) => ({ secret: previous?.[i] ?? '', expiresAt }));
    return { id: row.id, publicKey: row.public_key, webhook: { ...settings, secret, ...(grace?.length ? { previousSecrets: grace } : {}) } as MerchantWebhook };
  }
  let opened: Secrets | undefined;
  const secrets = () => (opened ??= JSON.parse(box.open(sealed, row.id)) as Secrets);
  const webhook = { ...settings } as MerchantWebhook;
  Object.defineProperty(webhook, 'secret', { enumerable: true, configurable: true, get: () => secrets().secret });
  if (expiries?.length) {
    webhook.previousSecrets = expiries.map(({ expiresAt }, i) => {
      const grace = { expiresAt } as { secret: string; expiresAt: string };
      Object.defineProperty(grace, 'secret', { enumerable: true, configurable: true, get: () => secrets().previous?.[i] ?? '' });
      return grace;
    });
  }
  return { id: row.id, publicKey: row.public_key, webhook };
}

/** The row's columns for a merchant: [public_key, webhook, secrets]. The failing clock is not the row's (endpoint_health). */
export function columnsOf(merchant: Merchant, box: SecretBox): [string, string | null, string | null] {
  if (!merchant.webhook) return [merchant.publicKey, null, null];
  const { secret, previousSecrets, failingSince: _since, lastFailureAt: _last, ...settings } = merchant.webhook;
  const clear: ClearWebhook = previousSecrets?.length ? { ...settings, previousSecrets: previousSecrets.map(({ expiresAt }) => ({ expiresAt })) } : settings;
  const sealed = box.seal(JSON.stringify(previousSecrets?.length ? { secret, previous: previousSecrets.map((grace) => grace.secret) } : { secret }), merchant.id);
  return [merchant.publicKey, JSON.stringify(clear), sealed];
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
