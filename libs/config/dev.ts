/**
 * Development defaults: with the bundled development merchants (the default MERCHANTS_FILE), the
 * resend API verifies tokens with a fixed development secret and webhooks may reach loopback (the
 * demo merchant), so `npm start` works on a fresh clone. Any real MERCHANTS_FILE requires
 * AUTH_JWT_SECRET or AUTH_JWKS_URL, and ALLOW_PRIVATE_TARGETS keeps its default, false.
 */
export const DEV_MERCHANTS_FILE = 'config/merchants.dev.json';
export const DEV_JWT_SECRET = 'dev-only-jwt-secret-never-use-in-production-0123456789';

export function withDevDefaults(env: Record<string, string | undefined>): { env: Record<string, string | undefined>; dev: boolean } {
  const dev = (env.MERCHANTS_FILE || DEV_MERCHANTS_FILE) === DEV_MERCHANTS_FILE;
  if (!dev) return { env, dev };
  const withDefaults = { ...env };
  if (!env.AUTH_JWT_SECRET && !env.AUTH_JWKS_URL) withDefaults.AUTH_JWT_SECRET = DEV_JWT_SECRET;
  if (!env.ALLOW_PRIVATE_TARGETS) withDefaults.ALLOW_PRIVATE_TARGETS = 'true';
  return { env: withDefaults, dev };
}
