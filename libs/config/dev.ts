/**
 * Development mode (a fresh clone works) is switched on with WEBHOOKS_DEV=true, never inferred from
 * NODE_ENV, which libraries and images set for their own reasons.
 */
import { TRUE_VALUES } from './env.js';
import { DEV_SECRETS_KEY } from './merchants.js';

export const DEV_MERCHANTS_FILE = 'config/merchants.dev.json';
export const DEV_JWT_SECRET = 'dev-only-jwt-secret-never-use-in-production-0123456789';

function isDevMode(env: Record<string, string | undefined>): boolean {
  return TRUE_VALUES.includes((env.WEBHOOKS_DEV ?? '').trim().toLowerCase());
}

export function withDevDefaults(env: Record<string, string | undefined>): { env: Record<string, string | undefined>; dev: boolean } {
  const dev = isDevMode(env);
  if (!dev) return { env, dev };
  const withDefaults: Record<string, string | undefined> = { ...env, WEBHOOKS_DEV: 'true' };
  if (!env.SECRETS_KEY) withDefaults.SECRETS_KEY = DEV_SECRETS_KEY;
  if (!env.AUTH_JWT_SECRET && !env.AUTH_JWKS_URL) withDefaults.AUTH_JWT_SECRET = DEV_JWT_SECRET;
  if (!env.ALLOW_PRIVATE_TARGETS) withDefaults.ALLOW_PRIVATE_TARGETS = 'true';
  return { env: withDefaults, dev };
}

/** The warning a program logs at start while development mode is on, or when NODE_ENV=development switches nothing on. */
export function devModeWarning(env: Record<string, string | undefined>): { message: string; fields: Record<string, unknown> } | undefined {
  if (isDevMode(env)) {
    return {
      message: `development mode is on (WEBHOOKS_DEV=true)${env.DATABASE_URL ? ' against DATABASE_URL' : ''}: webhook URLs may be http${env.ALLOW_PRIVATE_TARGETS ? '' : ' and private addresses (ALLOW_PRIVATE_TARGETS defaults to true)'}, development keys stand in for those left unset; never in production`,
      fields: { databaseUrlSet: env.DATABASE_URL !== undefined && env.DATABASE_URL !== '' },
    };
  }
  if (env.NODE_ENV === 'development') {
    return { message: 'NODE_ENV=development does not switch development mode on: set WEBHOOKS_DEV=true for it', fields: {} };
  }
  return undefined;
}
