import { SignJWT } from 'jose';
import { type Dispatcher, getGlobalDispatcher } from 'undici';
import { DEV_JWT_SECRET, parseDuration } from '../../libs/config/index.js';
import { ADMIN_SCOPE } from '../api/auth.js';
import { CliCommand, EXIT, UsageError, writeLine } from './command.js';

/** A token signed with `secret`; AUTH_JWT_ISSUER and AUTH_JWT_AUDIENCE, when set, become its iss and aud, as the API checks them. */
async function signToken(env: Record<string, string | undefined>, secret: string, subject: string, scopes: string[], expiresAt: number | string): Promise<string> {
  const jwt = new SignJWT(scopes.length > 0 ? { scope: scopes.join(' ') } : {})
    .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
    .setSubject(subject)
    .setIssuedAt()
    .setExpirationTime(expiresAt);
  if (env.AUTH_JWT_ISSUER) jwt.setIssuer(env.AUTH_JWT_ISSUER);
  if (env.AUTH_JWT_AUDIENCE) jwt.setAudience(env.AUTH_JWT_AUDIENCE);
  return jwt.sign(new TextEncoder().encode(secret));
}

export function adminApiBase(env: Record<string, string | undefined>, given?: string): URL {
  const base = given ?? env.WEBHOOKS_API_URL ?? `http://127.0.0.1:${env.ADMIN_PORT || env.PORT || '8080'}`;
  if (!URL.canParse(base)) throw new UsageError('WEBHOOKS_API_URL is not a URL (e.g. http://127.0.0.1:8080)');
  // fetch refuses user:password@, and its error quotes the URL: refused here, without printing the password.
  const url = new URL(base);
  if (url.username || url.password) throw new UsageError(`the admin API's URL (${url.origin}, --api or WEBHOOKS_API_URL) must not carry user:password@: the CLI authenticates with its admin token`);
  return url;
}

type Envelope = { message?: unknown; error?: { code?: unknown }; data?: unknown };
type AdminAnswer = { status: number; headers: Dispatcher.ResponseData['headers']; message?: string; code?: unknown; data?: unknown };

/**
 * `method` on a route of the admin API under its URL's path (an API behind an ingress), with its query and `query`:
 * the status and the envelope's message (when a string), error code and data. `unreachable`: no answer came.
 */
export async function callAdminApi(
  base: URL,
  token: string,
  method: Dispatcher.HttpMethod,
  route: string,
  options: { query?: Record<string, string>; body?: unknown; timeoutMs: number; unreachable: (err: Error) => Error },
): Promise<AdminAnswer> {
  const url = new URL(base);
  for (const [name, value] of Object.entries(options.query ?? {})) url.searchParams.set(name, value);
  // undici's dispatcher sends the path as given; fetch would take a segment . or .. (or %2E) for a move up the path.
  const path = `${url.pathname.replace(/\/+$/, '')}${route}${url.search}`;
  const headers = { authorization: `Bearer ${token}`, accept: 'application/json', 'content-type': 'application/json' };
  const body = options.body === undefined ? undefined : JSON.stringify(options.body);
  const res = await getGlobalDispatcher()
    .request({ origin: base.origin, path, method, headers, body, signal: AbortSignal.timeout(options.timeoutMs) })
    .catch((err: Error) => {
      throw options.unreachable(err);
    });
  const json = (await res.body.json().catch(() => undefined)) as Envelope | null | undefined;
  const message = typeof json?.message === 'string' ? json.message : undefined;
  return { status: res.statusCode, headers: res.headers, message, code: json?.error?.code, data: json?.data };
}

/** Signed with the development secret as a last resort: only an API in development mode (npm start) accepts it. */
export async function adminToken(env: Record<string, string | undefined>, given?: string): Promise<string> {
  return given ?? env.WEBHOOKS_ADMIN_TOKEN ?? signToken(env, env.AUTH_JWT_SECRET ?? DEV_JWT_SECRET, 'webhooks-cli', [ADMIN_SCOPE], '5m');
}

export function declareToken(program: CliCommand): void {
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
    .handle(
      (raw: { merchant?: string; admin: boolean; scope?: string; ttl: string }) => {
        const scopes = (raw.scope ?? '').split(/[\s,]+/).filter((s) => s !== '');
        if (raw.admin && !scopes.includes(ADMIN_SCOPE)) scopes.push(ADMIN_SCOPE);
        if (raw.merchant === undefined && scopes.length === 0) throw new UsageError('token needs --merchant <id> (resend API) or --admin (admin API)');
        if (raw.merchant !== undefined && (raw.merchant.trim() === '' || raw.merchant.length > 200)) {
          throw new UsageError('--merchant takes an id of 1 to 200 characters');
        }
        const ttlMs = parseDuration(raw.ttl);
        if (ttlMs === undefined || ttlMs < 1000 || ttlMs > 30 * 86_400_000) throw new UsageError('--ttl takes a duration from 1s to 30d, e.g. 1h');
        // An admin token without --merchant speaks for the operator: the admin API checks the scope, not the subject.
        return { subject: raw.merchant ?? 'operator', scopes, ttlMs };
      },
      async (options, ctx) => {
        const secret = ctx.env.AUTH_JWT_SECRET;
        if (!secret) {
          throw new UsageError('token needs AUTH_JWT_SECRET (the secret the API verifies tokens with), or WEBHOOKS_DEV=true for the development one');
        }
        writeLine(ctx.stdout, await signToken(ctx.env, secret, options.subject, options.scopes, Math.floor((Date.now() + options.ttlMs) / 1000)));
      },
    );
}
