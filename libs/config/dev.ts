/**
 * Development defaults: with the bundled development merchants (the default MERCHANTS_FILE), the
 * resend API verifies tokens with a fixed development secret so `npm start` works on a fresh clone.
 * Any real MERCHANTS_FILE requires AUTH_JWT_SECRET or AUTH_JWKS_URL.
 */
export const DEV_MERCHANTS_FILE = 'config/merchants.dev.json';
export const DEV_JWT_SECRET = 'dev-only-jwt-secret-never-use-in-production-0123456789';

export function withDevDefaults(env: Record<string, string | undefined>): { env: Record<string, string | undefined>; dev: boolean } {
  const dev = (env.MERCHANTS_FILE ?? DEV_MERCHANTS_FILE) === DEV_MERCHANTS_FILE;
  if (!dev || env.AUTH_JWT_SECRET || env.AUTH_JWKS_URL) return { env, dev };
  return { env: { ...env, AUTH_JWT_SECRET: DEV_JWT_SECRET }, dev };
}
