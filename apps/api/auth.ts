import { createHash, timingSafeEqual } from 'node:crypto';
import { createRemoteJWKSet, errors as joseErrors, type JWTPayload, type JWTVerifyGetKey, type JWTVerifyOptions, jwtVerify } from 'jose';
import type { Merchant, MerchantDirectory } from '../../libs/merchants/index.js';
import { ApiError, retryAfter, unauthorized } from './errors.js';

export const ADMIN_SCOPE = 'webhooks:admin';

/** Fetching the auth service's keys (AUTH_JWKS_URL): a deadline, and the least time between two fetches. */
export const JWKS_FETCH = { timeoutMs: 5_000, cooldownMs: 30_000 };

/** The merchant public key in `x-auth-token`, and a Bearer JWT whose `sub` is that merchant (spec section 5). */
export class Authenticator {
  private readonly verifyKey: JWTVerifyGetKey;
  private readonly algorithms: string[];

  constructor(
    private readonly merchants: MerchantDirectory,
    keys: { secret: string } | { jwksUrl: string },
    /** AUTH_JWT_ISSUER, AUTH_JWT_AUDIENCE: checked when set. */
    private readonly checks: { issuer?: string; audience?: string } = {},
  ) {
    if ('secret' in keys) {
      // Imported once: jose would import a raw secret again for every token (0.1 ms a request).
      const key = crypto.subtle.importKey('raw', new TextEncoder().encode(keys.secret), { name: 'HMAC', hash: 'SHA-256' }, false, ['verify']);
      this.verifyKey = () => key;
      this.algorithms = ['HS256'];
    } else {
      const remote = createRemoteJWKSet(new URL(keys.jwksUrl), { cooldownDuration: JWKS_FETCH.cooldownMs, timeoutDuration: JWKS_FETCH.timeoutMs });
      // Failing to get the keys is ours (503); a token whose key is not in the set is the client's.
      this.verifyKey = (header, token) =>
        remote(header, token).catch((err: unknown) => {
          if (err instanceof joseErrors.JWKSNoMatchingKey || err instanceof joseErrors.JWKSMultipleMatchingKeys) throw err;
          throw new ApiError(503, 'auth_unavailable', 'The auth service could not be reached to check the access token; try again shortly', retryAfter(5_000));
        });
      this.algorithms = ['RS256', 'PS256', 'ES256', 'EdDSA'];
    }
  }

  async authenticate(publicKey: string | undefined, authorization: string | undefined): Promise<Merchant> {
    if (!publicKey || !authorization) {
      throw unauthorized('missing_credentials', 'x-auth-token and Authorization: Bearer <token> are both required');
    }
    const merchant = this.merchantByKey(publicKey);
    const token = bearerToken(authorization);
    if (!merchant || !token) throw unauthorized('invalid_credentials', 'The public key or the access token is not valid');
    const payload = await this.verify(token, 'The public key or the access token is not valid');
    if (payload.sub !== merchant.id) throw new ApiError(403, 'merchant_mismatch', 'The access token and the public key belong to different merchants');
    return merchant;
  }

  /** The admin API's check: a valid token whose `scope` (space-separated, or a list) includes webhooks:admin. */
  async authorizeAdmin(authorization: string | undefined): Promise<JWTPayload> {
    if (!authorization) throw unauthorized('missing_credentials', 'Authorization: Bearer <token> is required');
    const token = bearerToken(authorization);
    if (!token) throw unauthorized('invalid_credentials', 'The access token is not valid');
    const payload = await this.verify(token, 'The access token is not valid');
    const scope = payload.scope;
    const scopes = typeof scope === 'string' ? scope.split(' ') : Array.isArray(scope) ? scope : [];
    if (!scopes.includes(ADMIN_SCOPE)) throw new ApiError(403, 'insufficient_scope', `The access token lacks the ${ADMIN_SCOPE} scope`);
    return payload;
  }

  private async verify(token: string, invalid: string): Promise<JWTPayload> {
    try {
      return await verifyWithAnyKey(token, this.verifyKey, {
        algorithms: this.algorithms,
        requiredClaims: ['sub', 'exp'],
        clockTolerance: 5,
        issuer: this.checks.issuer,
        audience: this.checks.audience,
      });
    } catch (err) {
      if (err instanceof ApiError) throw err;
      if (err instanceof joseErrors.JWTExpired) throw unauthorized('token_expired', 'The access token has expired');
      throw unauthorized('invalid_credentials', invalid);
    }
  }

  /** Looks the key up by its digest and compares digests in constant time. */
  private merchantByKey(publicKey: string): Merchant | undefined {
    if (publicKey.length > 512) return undefined;
    const merchant = this.merchants.byPublicKey(publicKey);
    const given = digest(publicKey);
    const expected = digest(merchant?.publicKey ?? '\u0000no-merchant');
    return timingSafeEqual(given, expected) && merchant ? merchant : undefined;
  }
}

/** jwtVerify, trying each key when several of the JWKS could have signed the token (no `kid`, or a shared one). */
async function verifyWithAnyKey(token: string, getKey: JWTVerifyGetKey, options: JWTVerifyOptions): Promise<JWTPayload> {
  try {
    return (await jwtVerify(token, getKey, options)).payload;
  } catch (err) {
    if (!(err instanceof joseErrors.JWKSMultipleMatchingKeys)) throw err;
    for await (const key of err) {
      try {
        return (await jwtVerify(token, key, options)).payload;
      } catch (tried) {
        if (!(tried instanceof joseErrors.JWSSignatureVerificationFailed)) throw tried;
      }
    }
    throw new joseErrors.JWSSignatureVerificationFailed();
  }
}

/** `Bearer 1*SP token` (RFC 6750), the scheme in any case: HTTP auth schemes are case-insensitive (RFC 9110 11.1). */
function bearerToken(authorization: string): string | undefined {
  return /^Bearer +([A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*)$/i.exec(authorization)?.[1];
}

function digest(text: string): Buffer {
  return createHash('sha256').update(text).digest();
}
