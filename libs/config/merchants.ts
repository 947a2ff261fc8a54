import { z } from 'zod';
import { refuse } from './env.js';

const secretsKey = z
  .string()
  .transform((text, ctx) => {
    const trimmed = text.trim();
    const key = /^[0-9a-fA-F]{64}$/.test(trimmed) ? Buffer.from(trimmed, 'hex') : Buffer.from(trimmed, 'base64');
    if (key.length !== 32 || (!/^[0-9a-fA-F]{64}$/.test(trimmed) && key.toString('base64') !== trimmed)) {
      return refuse(ctx, 'must be 32 random bytes, as 64 hex digits or 44 characters of base64 (openssl rand -base64 32)');
    }
    return key;
  });

/** Development mode's key: it opens only what development mode sealed, and is refused outside it. */
export const DEV_SECRETS_KEY = 'ZGV2LW9ubHktc2VjcmV0cy1rZXktbmV2ZXItdXNlISE=';

/** Where merchants live, spread into the schema of each program that reads them (API, dispatcher, CLI). */
export const merchantStoreFields = {
  /** Seals webhook secrets in PostgreSQL (AES-256-GCM); required outside development mode. */
  SECRETS_KEY: secretsKey.optional(),
  /** The key SECRETS_KEY replaces, during its rotation: it only opens, never seals. */
  SECRETS_KEY_PREVIOUS: secretsKey.optional(),
};

/** Outside development mode, merchants need DATABASE_URL and SECRETS_KEY, and never the development key. */
export function requireMerchantStore(
  env: { DATABASE_URL?: string; SECRETS_KEY?: Buffer; WEBHOOKS_DEV?: boolean },
  ctx: z.RefinementCtx,
): void {
  if (!env.DATABASE_URL && !env.WEBHOOKS_DEV) {
    ctx.addIssue({ code: 'custom', path: ['DATABASE_URL'], message: 'is required: merchants live in PostgreSQL' });
  } else if (!env.SECRETS_KEY) {
    ctx.addIssue({ code: 'custom', path: ['SECRETS_KEY'], message: 'is required to seal webhook secrets in PostgreSQL (openssl rand -base64 32)' });
  } else if (!env.WEBHOOKS_DEV && env.SECRETS_KEY.equals(Buffer.from(DEV_SECRETS_KEY, 'base64'))) {
    ctx.addIssue({ code: 'custom', path: ['SECRETS_KEY'], message: 'is the development key; outside development mode use your own' });
  }
}
