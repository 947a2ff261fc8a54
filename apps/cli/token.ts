import { SignJWT } from 'jose';
import { parseDuration } from '../../libs/config/index.js';
import { UsageError } from './errors.js';

/** A development access token: HS256 with AUTH_JWT_SECRET, `sub` = merchant id, expiring after `ttl`. */
export async function tokenCommand(args: { merchant?: string; ttl: string; secret?: string }): Promise<string> {
  if (!args.merchant) throw new UsageError('token needs --merchant <id>');
  if (!args.secret) throw new UsageError('token needs AUTH_JWT_SECRET (the secret the API verifies tokens with)');
  const ttlMs = parseDuration(args.ttl);
  if (ttlMs === undefined || ttlMs < 1000 || ttlMs > 30 * 86_400_000) throw new UsageError('--ttl takes a duration from 1s to 30d, e.g. 1h');
  return new SignJWT({})
    .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
    .setSubject(args.merchant)
    .setIssuedAt()
    .setExpirationTime(Math.floor((Date.now() + ttlMs) / 1000))
    .sign(new TextEncoder().encode(args.secret));
}
