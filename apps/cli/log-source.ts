import { DEV_JWT_SECRET } from '../../libs/config/index.js';
import { type DeliveryLogQueries, deliveryLogQueries, onEndpoint, openPostgres, type WebhookDetail, type WebhookSummary } from '../../libs/delivery-store/index.js';
import { ADMIN_SCOPE } from '../api/auth.js';
import { type CliContext, UsageError } from './command.js';
import { signToken } from './token.js';

/** What `webhooks log` reads: the delivery log in PostgreSQL, or the same through the admin API. */
type LogSource = Pick<DeliveryLogQueries, 'getWebhook' | 'listWebhooks' | 'listWebhookDetails'> & { close(): Promise<void> };

/** By default `npm start`'s API, whose development database lives inside its process. */
export function adminApiBase(env: Record<string, string | undefined>, given?: string): string {
  return (given ?? env.WEBHOOKS_API_URL ?? `http://127.0.0.1:${env.ADMIN_PORT || env.PORT || '8080'}`).replace(/\/+$/, '');
}

/** Signed with the development secret as a last resort: only an API in development mode (npm start) accepts it. */
export async function adminToken(env: Record<string, string | undefined>, given?: string): Promise<string> {
  return given ?? env.WEBHOOKS_ADMIN_TOKEN ?? signToken(env, env.AUTH_JWT_SECRET ?? DEV_JWT_SECRET, 'webhooks-cli', [ADMIN_SCOPE], '5m');
}

/** DATABASE_URL when set; else the running API's admin routes, as beside `npm start`, whose database is in its process. */
export async function openLogSource(ctx: CliContext): Promise<LogSource> {
  const url = ctx.env.DATABASE_URL;
  if (url) {
    const database = openPostgres(url, { maxConnections: 2, applicationName: 'webhooks-cli log' });
    return { ...deliveryLogQueries(database), close: () => database.close() };
  }
  let base: URL;
  try {
    base = new URL(adminApiBase(ctx.env));
  } catch {
    throw new UsageError('WEBHOOKS_API_URL is not a URL (e.g. http://127.0.0.1:8080)');
  }
  return apiLogSource(base, await adminToken(ctx.env));
}

/** The admin API's routes for the log, answering as the database does. */
function apiLogSource(base: URL, token: string): LogSource {
  const get = async <T>(path: string, query: Record<string, string>, notFoundIsNone = false): Promise<T | undefined> => {
    const url = new URL(path, base);
    for (const [name, value] of Object.entries(query)) url.searchParams.set(name, value);
    let res: Response;
    try {
      res = await fetch(url, { headers: { authorization: `Bearer ${token}`, accept: 'application/json' }, signal: AbortSignal.timeout(15_000) });
    } catch {
      throw new Error(
        `DATABASE_URL is not set, and no API answers at ${base.origin}: set DATABASE_URL to read the delivery log in PostgreSQL, ` +
          'or start the API (npm start) or set WEBHOOKS_API_URL to one that runs',
      );
    }
    const body = (await res.json().catch(() => undefined)) as { message?: string; error?: { code?: string }; data?: T } | undefined;
    if (res.ok) return body?.data;
    if (res.status === 404 && notFoundIsNone && body?.error?.code === 'webhook_not_found') return undefined;
    if (res.status === 401 || res.status === 403) {
      throw new Error(`the API at ${base.origin} refused the CLI's token (${res.status}): set WEBHOOKS_ADMIN_TOKEN to an admin token, or AUTH_JWT_SECRET to the API's`);
    }
    throw new Error(`the API at ${base.origin} answered ${res.status}: ${body?.message ?? 'no message'}`);
  };
  const source: LogSource = {
    getWebhook: (merchantId, webhookId) => get<WebhookDetail>(`/admin/merchants/${encodeURIComponent(merchantId)}/webhooks/${encodeURIComponent(webhookId)}`, {}, true),
    async listWebhooks(merchantId, filters) {
      const query: Record<string, string> = { limit: String(filters.limit) };
      for (const name of ['reference', 'status', 'event', 'endpointId'] as const) if (filters[name] !== undefined) query[name] = String(filters[name]);
      return (await get<{ webhooks: WebhookSummary[]; nextCursor: string | null }>(`/admin/merchants/${encodeURIComponent(merchantId)}/webhooks`, query))!;
    },
    async listWebhookDetails(merchantId, filters) {
      const page = await source.listWebhooks(merchantId, filters);
      // One at a time: the API lets a merchant's log have 2 reads in flight and 8 waiting, and
      // answers 429 past them; a reference rarely names more than a few webhooks.
      const details: WebhookDetail[] = [];
      for (const w of page.webhooks) {
        const detail = await source.getWebhook(merchantId, w.webhookId);
        // The list's item is one delivery: its detail shows that delivery (the database's answer does the same).
        const delivery = detail && onEndpoint(detail, w.endpointId);
        if (delivery) details.push(delivery);
      }
      return { webhooks: details, nextCursor: page.nextCursor };
    },
    close: async () => {},
  };
  return source;
}
