import { createHash } from 'node:crypto';
import type { Queryable } from '../delivery-store/index.js';
import type { Endpoint, Merchant } from './schema.js';
import type { SecretBox } from './secret-box.js';

/** A program that has not polled for half of it loads everything again. */
export const TOMBSTONE_KEEP_MS = 24 * 3_600_000;

/** So that no row names a deleted merchant. */
export function idDigest(merchantId: string): string {
  return createHash('sha256').update(merchantId, 'utf8').digest('base64url');
}

/** Notified on commit of a write, with the merchant id. */
export const CHANGES_CHANNEL = 'webhooks_merchants';

export const MERCHANT_COLUMNS = 'id, public_key, endpoints, secrets, version';

/** Everything but the secrets' values. */
type ClearEndpoint = Omit<Endpoint, 'secret' | 'previousSecrets' | 'failingSince' | 'lastFailureAt'> & { previousSecrets?: Array<{ expiresAt: string }> };

export interface MerchantRow {
  id: string;
  public_key: string;
  endpoints: ClearEndpoint[];
  secrets: string | null;
  version: string | number;
}

/** The previous secrets in the order of the clear expiries. */
interface Secrets {
  secret: string;
  previous?: string[];
}

/** By endpoint id: one seal per merchant, bound to its id. */
type SealedSecrets = Record<string, Secrets>;

/** `open: false`: each secret is opened on first read, so a program that never signs opens none. */
export function merchantOf(row: MerchantRow, box: SecretBox, open = true): Merchant {
  const sealed = row.secrets;
  if (row.endpoints.length === 0 || sealed === null) return { id: row.id, publicKey: row.public_key, endpoints: [] };
  let opened: SealedSecrets | undefined;
  const secrets = () => (opened ??= byEndpoint(JSON.parse(box.open(sealed, row.id, sealedSecretsOf(row))) as SealedSecrets | Secrets, row.endpoints[0]!.id));
  const endpoints = row.endpoints.map(({ previousSecrets: expiries, ...settings }) => {
    const mine = () => secrets()[settings.id];
    const endpoint = withSecret<Endpoint>({ ...settings, secret: '' }, () => mine()?.secret ?? '', open);
    if (expiries?.length) {
      endpoint.previousSecrets = expiries.map(({ expiresAt }, i) =>
        withSecret({ secret: '', expiresAt }, () => mine()?.previous?.[i] ?? '', open));
    }
    return endpoint;
  });
  return { id: row.id, publicKey: row.public_key, endpoints };
}

/** `open`: the secret as a plain field (a dispatcher reads it for every delivery); else opened on first read. */
function withSecret<T extends { secret: string }>(target: T, secret: () => string, open: boolean): T {
  if (open) target.secret = secret();
  else Object.defineProperty(target, 'secret', { enumerable: true, configurable: true, get: secret });
  return target;
}

/** Where a merchant's sealed secrets are, for a message: never a value. */
export function sealedSecretsOf(row: Pick<MerchantRow, 'id' | 'endpoints'>): string {
  const ids = row.endpoints.map((endpoint) => endpoint.id);
  const of = ids.length === 0 ? '' : ` (endpoint${ids.length === 1 ? '' : 's'} ${ids.join(', ')})`;
  return `the webhook secrets of merchant ${row.id}${of}, sealed together in its row of merchants`;
}

/** Sealed secrets by endpoint; a row sealed before migration 0011 holds its one endpoint's alone. */
function byEndpoint(sealed: SealedSecrets | Secrets, first: string): SealedSecrets {
  return typeof sealed.secret === 'string' ? { [first]: sealed as Secrets } : (sealed as SealedSecrets);
}

/** [public_key, endpoints, secrets]. The failing clock is not the row's. */
export function columnsOf(merchant: Merchant, box: SecretBox): [string, string, string | null] {
  if (merchant.endpoints.length === 0) return [merchant.publicKey, '[]', null];
  const sealed: SealedSecrets = {};
  const clear = merchant.endpoints.map(({ secret, previousSecrets, failingSince: _since, lastFailureAt: _last, ...settings }): ClearEndpoint => {
    sealed[settings.id] = previousSecrets?.length ? { secret, previous: previousSecrets.map((grace) => grace.secret) } : { secret };
    return previousSecrets?.length ? { ...settings, previousSecrets: previousSecrets.map(({ expiresAt }) => ({ expiresAt })) } : settings;
  });
  return [merchant.publicKey, JSON.stringify(clear), box.seal(JSON.stringify(sealed), merchant.id)];
}

/** After SECRETS_KEY changed: seals again what an older key sealed, each only if unchanged since read. */
export async function resealSecrets(db: Queryable, box: SecretBox): Promise<number> {
  let count = 0;
  const merchants = await db.query<{ id: string; endpoints: ClearEndpoint[]; secrets: string }>('SELECT id, endpoints, secrets FROM merchants WHERE secrets IS NOT NULL');
  for (const row of merchants.rows.filter((r) => !box.isCurrent(r.secrets))) {
    const plain = box.open(row.secrets, row.id, sealedSecretsOf(row));
    const { rows } = await db.query('UPDATE merchants SET secrets = $2 WHERE id = $1 AND secrets = $3 RETURNING id', [row.id, box.seal(plain, row.id), row.secrets]);
    count += rows.length;
  }
  const kept = await db.query<{ key: string; merchant_id: string | null; result: string }>('SELECT key, merchant_id, result FROM merchant_idempotency');
  for (const row of kept.rows.filter((r) => !box.isCurrent(r.result))) {
    const plain = box.open(row.result, row.key, `the answer kept for Idempotency-Key ${row.key} (merchant ${row.merchant_id ?? 'unknown'}), in merchant_idempotency`);
    const { rows } = await db.query('UPDATE merchant_idempotency SET result = $2 WHERE key = $1 AND result = $3 RETURNING key', [row.key, box.seal(plain, row.key), row.result]);
    count += rows.length;
  }
  return count;
}

/** No secret opened (no SECRETS_KEY needed); undefined: no such merchant. */
export async function webhookSettingsOf(db: Queryable, merchantId: string): Promise<Array<Pick<Endpoint, 'id' | 'enabled' | 'events'>> | undefined> {
  const { rows } = await db.query<{ endpoints: ClearEndpoint[] }>('SELECT endpoints FROM merchants WHERE id = $1', [merchantId]);
  return rows[0]?.endpoints;
}
