import { ADMIN_SCOPE } from '../api/auth.js';
import { linkLifetimeMs, PORTAL_PERMISSIONS } from '../../libs/portal/index.js';
import { checkMerchantId, CliCommand, EXIT, UsageError, writeLine } from './command.js';
import { adminApiBase, adminToken, callAdminApi } from './token.js';

const PERMISSIONS: readonly string[] = PORTAL_PERMISSIONS;

export function declarePortal(program: CliCommand): void {
  program
    .command('portal')
    .summary("a single-use link to a merchant's portal (development and support)")
    .description(
      'Asks the admin API (POST /admin/merchants/<id>/portal-sessions) for a link to the merchant portal and prints it. ' +
        'The link works once, until it expires; opening it gives a session in the browser. The admin token is made with ' +
        `AUTH_JWT_SECRET (scope ${ADMIN_SCOPE}; else the development secret, which only an API in development mode accepts), or given with --admin-token or WEBHOOKS_ADMIN_TOKEN.`,
    )
    .requiredOption('--merchant <id>', 'the merchant whose portal to open')
    .option('--permissions <list>', `what the link allows beyond viewing, comma-separated: ${PERMISSIONS.join(', ')}, or none (default none: view only)`)
    .option('--expires-in <duration>', 'how long the link and its session live, 1s to 7d', '1h')
    .option('--api <url>', 'the admin API (default WEBHOOKS_API_URL, else http://127.0.0.1:<ADMIN_PORT or PORT or 8080>)')
    .option('--revoke', 'instead: end every portal session and unused link of the merchant (a leaked link, a merchant who left)', false)
    .option('--admin-token <jwt>', `a token with the ${ADMIN_SCOPE} scope, instead of one made with AUTH_JWT_SECRET`)
    .addHelpText('after', `\nEnvironment: WEBHOOKS_API_URL, WEBHOOKS_ADMIN_TOKEN, AUTH_JWT_SECRET, AUTH_JWT_ISSUER, AUTH_JWT_AUDIENCE, ADMIN_PORT, PORT.\n${EXIT}`)
    .handle(
      (raw: { merchant?: string; permissions?: string; expiresIn: string; api?: string; adminToken?: string; revoke: boolean }) => {
        const merchant = checkMerchantId(raw.merchant);
        let permissions: string[] | undefined;
        if (raw.permissions !== undefined) {
          permissions = raw.permissions === 'none' ? [] : raw.permissions.split(',').map((p) => p.trim()).filter((p) => p !== '');
          const unknown = permissions.find((p) => !PERMISSIONS.includes(p));
          if (unknown !== undefined) throw new UsageError(`--permissions takes ${PERMISSIONS.join(', ')} or none, not ${unknown}`);
        }
        // The API's bounds, so that a lifetime out of them exits 2, not 1 (the API's 400).
        const lifetime = /^\d{1,7}(s|m|h|d)$/.test(raw.expiresIn) ? linkLifetimeMs(raw.expiresIn) : undefined;
        if (lifetime === undefined) throw new UsageError('--expires-in takes a duration from 1s to 7d, such as 30m, 1h or 7d');
        if (raw.api !== undefined && !URL.canParse(raw.api)) throw new UsageError('--api takes a URL such as http://127.0.0.1:8080');
        if (raw.revoke && raw.permissions !== undefined) throw new UsageError('--revoke ends sessions; it takes no --permissions');
        return { ...raw, merchant, permissions };
      },
      async (options, ctx) => {
        const base = adminApiBase(ctx.env, options.api);
        const token = await adminToken(ctx.env, options.adminToken);
        const route = `/admin/merchants/${encodeURIComponent(options.merchant)}/portal-sessions`;
        const { status, message: said, data } = await callAdminApi(base, token, options.revoke ? 'DELETE' : 'POST', route, {
          body: options.revoke ? undefined : { ...(options.permissions ? { permissions: options.permissions } : {}), expiresIn: options.expiresIn },
          timeoutMs: 10_000,
          unreachable: (err) => new Error(`the admin API at ${base} could not be reached (${err.message}); is the API running? --api says where`),
        });
        if (status !== (options.revoke ? 200 : 201)) throw new Error(`the admin API answered ${status}: ${said ?? 'no message'}`);
        // A proxy or another service at that address: said, never printed as "undefined".
        const notTheApi = (what: string) => new Error(`the admin API answered ${status} without ${what}: is ${base} the webhooks API?`);
        if (options.revoke) {
          if (said === undefined) throw notTheApi('its message');
          writeLine(ctx.stderr, said);
          return 0;
        }
        const { url, expiresAt } = (data ?? {}) as { url?: unknown; expiresAt?: unknown };
        if (typeof url !== 'string' || typeof expiresAt !== 'string') throw notTheApi('a portal link');
        writeLine(ctx.stdout, url);
        writeLine(ctx.stderr, `works once, until ${expiresAt}`);
      },
    );
}
