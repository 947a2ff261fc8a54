import { createHash, timingSafeEqual } from 'node:crypto';
import { createRemoteJWKSet, errors as joseErrors, type JWTVerifyGetKey, jwtVerify } from 'jose';
import type { Merchant, MerchantDirectory } from '../../libs/merchants/index.js';
import { forbidden, unauthorized, unavailable } from './errors.js';

export type JwtKeySource = { secret: string } | { jwksUrl: string };

/**
 * Both credentials of spec section 5: the merchant public key in `x-auth-token` and a Bearer JWT
 * from the platform's auth service whose `sub` is that merchant.
 */
export class Authenticator {
  private readonly verifyKey: Uint8Array | JWTVerifyGetKey;
  private readonly algorithms: string[];

  constructor(private readonly merchants: MerchantDirectory, keys: JwtKeySource) {
    if ('secret' in keys) {
      this.verifyKey = new TextEncoder().encode(keys.secret);
      this.algorithms = ['HS256'];
    } else {
      this.verifyKey = createRemoteJWKSet(new URL(keys.jwksUrl), { cooldownDuration: 30_000, timeoutDuration: 5_000 });
      this.algorithms = ['RS256', 'PS256', 'ES256', 'EdDSA'];
    }
  }

  async authenticate(publicKey: string | undefined, authorization: string | undefined): Promise<Merchant> {
    if (!publicKey || !authorization) {
      throw unauthorized('missing_credentials', 'x-auth-token and Authorization: Bearer <token> are both required');
    }
    const merchant = this.merchantByKey(publicKey);
    const match = /^Bearer ([A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*)$/.exec(authorization);
    if (!merchant || !match) throw unauthorized('invalid_credentials', 'The public key or the access token is not valid');

    let subject: string | undefined;
    try {
      const { payload } = await jwtVerify(match[1]!, this.verifyKey as Uint8Array, {
        algorithms: this.algorithms,
        requiredClaims: ['sub', 'exp'],
        clockTolerance: 5,
      });
      subject = payload.sub;
    } catch (err) {
      if (err instanceof joseErrors.JWTExpired) throw unauthorized('token_expired', 'The access token has expired');
      if (err instanceof joseErrors.JWKSTimeout) throw unavailable('The token signing keys could not be fetched');
      if (err instanceof joseErrors.JOSEError) throw unauthorized('invalid_credentials', 'The public key or the access token is not valid');
      // fetch() failing to reach AUTH_JWKS_URL: our trouble, not the client's.
      throw unavailable('The token signing keys could not be fetched');
    }
    if (subject !== merchant.id) throw forbidden('The access token and the public key belong to different merchants');
    return merchant;
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

function digest(text: string): Buffer {
  return createHash('sha256').update(text).digest();
}
