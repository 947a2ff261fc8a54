import type { Command } from 'commander';
import { SignJWT } from 'jose';
import { parseDuration } from '../../libs/config/index.js';
import { action, type CliContext, type CliIo, EXIT, UsageError, writeLine } from './command.js';

/** The scope the admin API requires (DESIGN.md, "Admin API"). */
export const ADMIN_SCOPE = 'webhooks:admin';

/** Who an admin token speaks for when no --merchant is given: the admin API checks the scope, not the subject. */
const OPERATOR_SUBJECT = 'operator';

interface Raw {
  merchant?: string;
  admin: boolean;
  scope?: string;
  ttl: string;
}

export interface TokenOptions {
  subject: string;
  scopes: string[];
  ttlMs: number;
}

export function declareToken(program: Command, io: CliIo): void {
  program
    .command('token')
    .summary('a development access token: --merchant for the resend API, --admin for the admin API')
    .usage('--merchant <id> [--scope <scopes>] [--ttl 1h]  |  --admin [--scope <scopes>] [--ttl 1h]')
    .description(
      'Prints an access token signed with AUTH_JWT_SECRET (the development secret in development mode): ' +
        "with --merchant, a merchant's token for the resend API (sub = the merchant id); with --admin, a token " +
        `for the admin API (scope ${ADMIN_SCOPE}). In production the platform's auth service issues them. ` +
        'AUTH_JWT_ISSUER and AUTH_JWT_AUDIENCE, when set, become its iss and aud, as the API checks them.',
    )
    .option('--merchant <id>', "the merchant the token is for (its sub); a merchant's token for the resend API")
    .option('--admin', `add the ${ADMIN_SCOPE} scope: a token for the admin API`, false)
    .option('--scope <scopes>', 'scopes to carry, space- or comma-separated (--admin adds webhooks:admin)')
    .option('--ttl <duration>', 'how long the token is valid, 1s to 30d', '1h')
    .addHelpText('after', `\n${EXIT}`)
    .action(action(io, check, run));
}

function check(raw: Raw): TokenOptions {
  const scopes = (raw.scope ?? '').split(/[\s,]+/).filter((s) => s !== '');
  if (raw.admin && !scopes.includes(ADMIN_SCOPE)) scopes.push(ADMIN_SCOPE);
  if (raw.merchant === undefined && scopes.length === 0) throw new UsageError('token needs --merchant <id> (resend API) or --admin (admin API)');
  if (raw.merchant !== undefined && (raw.merchant.trim() === '' || raw.merchant.length > 200)) {
    throw new UsageError('--merchant takes an id of 1 to 200 characters');
  }
  const ttlMs = parseDuration(raw.ttl);
  if (ttlMs === undefined || ttlMs < 1000 || ttlMs > 30 * 86_400_000) throw new UsageError('--ttl takes a duration from 1s to 30d, e.g. 1h');
  return { subject: raw.merchant ?? OPERATOR_SUBJECT, scopes, ttlMs };
}

async function run(options: TokenOptions, ctx: CliContext): Promise<number> {
  const secret = ctx.env.AUTH_JWT_SECRET;
  if (!secret) {
    throw new UsageError('token needs AUTH_JWT_SECRET (the secret the API verifies tokens with), or WEBHOOKS_DEV=true for the development one');
  }
  const jwt = new SignJWT(options.scopes.length > 0 ? { scope: options.scopes.join(' ') } : {})
    .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
    .setSubject(options.subject)
    .setIssuedAt()
    .setExpirationTime(Math.floor((Date.now() + options.ttlMs) / 1000));
  if (ctx.env.AUTH_JWT_ISSUER) jwt.setIssuer(ctx.env.AUTH_JWT_ISSUER);
  if (ctx.env.AUTH_JWT_AUDIENCE) jwt.setAudience(ctx.env.AUTH_JWT_AUDIENCE);
  writeLine(ctx.stdout, await jwt.sign(new TextEncoder().encode(secret)));
  return 0;
}
