import type { Request, Router } from 'express';
import type { DeliveryLogQueries, WebhookFilters } from '../../libs/delivery-store/index.js';
import type { KeyedConcurrency } from './concurrency.js';
import { ApiError, notFound, rateLimited } from './errors.js';
import { mount } from './mount.js';
import type { RateLimiter } from './rate-limit.js';

/** The list's filters as the route table parsed them (listQuery), for the log's query. */
export function listFilters(query: Record<string, unknown>): WebhookFilters {
  return {
    reference: query.reference as string | undefined,
    event: query.event as string | undefined,
    status: query.status as string | undefined,
    endpointId: query.endpointId as string | undefined,
    since: query.since as string | undefined,
    until: query.until as string | undefined,
    cursor: query.cursor as string | undefined,
    limit: query.limit as number,
  };
}

export interface LogHandlerDeps {
  /** Absent with DELIVERY_LOG=off: the routes answer 503 log_disabled. */
  log?: DeliveryLogQueries;
  /** Reads per merchant per minute (LOG_RATE_LIMIT): 429 rate_limited past it. */
  logLimiter?: RateLimiter;
  /** Reads in flight per merchant: 429 too_many_concurrent_queries past it. */
  logConcurrency?: KeyedConcurrency;
}

type MerchantOf = (req: Request, params: Record<string, unknown>) => Promise<string>;

function queries(deps: LogHandlerDeps): DeliveryLogQueries {
  if (!deps.log) {
    throw new ApiError(503, 'log_disabled', 'The delivery log is switched off on this service (DELIVERY_LOG=off)');
  }
  return deps.log;
}

/**
 * The delivery log's three reads, once for the merchant's own (/nucleus, merchant auth) and once
 * for any merchant (/admin, under the admin router's auth). `merchantOf` says whose log is read.
 */
export function mountLogRoutes(router: Router, deps: LogHandlerDeps, admin: { base: string; merchantOf: MerchantOf } | { merchantOf: MerchantOf }): void {
  const isAdmin = 'base' in admin;
  const base = isAdmin ? admin.base : '';
  const ids = isAdmin
    ? ({ list: 'adminListWebhooks', get: 'adminGetWebhook', feed: 'adminListEvents' } as const)
    : ({ list: 'listWebhooks', get: 'getWebhook', feed: 'listEvents' } as const);

  /**
   * Runs one read of `merchantId`'s log within its limits. An operator's reads (/admin) count
   * apart from the merchant's own, so that support looking into a merchant does not use up that
   * merchant's reads, and are bounded per merchant read all the same.
   */
  const read = async <T>(merchantId: string, work: (log: DeliveryLogQueries) => Promise<T>): Promise<T> => {
    const log = queries(deps);
    const key = isAdmin ? `admin ${merchantId}` : merchantId;
    const allowed = (await deps.logLimiter?.take(key)) ?? { ok: true };
    if (!allowed.ok) throw rateLimited(allowed.retryAfterSeconds, 'delivery log reads');
    return deps.logConcurrency ? deps.logConcurrency.run(key, () => work(log)) : work(log);
  };

  mount(router, ids.list, async (req, res, { params, query }) => {
    const merchantId = await admin.merchantOf(req, params);
    const page = await read(merchantId, (log) => log.listWebhooks(merchantId, listFilters(query)));
    res.json({ message: `${page.webhooks.length} webhook(s)`, error: null, data: page });
  }, base);

  mount(router, ids.get, async (req, res, { params }) => {
    const merchantId = await admin.merchantOf(req, params);
    const webhookId = params.webhookId as string;
    const webhook = await read(merchantId, (log) => log.getWebhook(merchantId, webhookId));
    if (!webhook) throw notFound('webhook_not_found', `No webhook ${webhookId.slice(0, 200)} in the delivery log`);
    res.json({ message: `webhook ${webhookId}`, error: null, data: webhook });
  }, base);

  mount(router, ids.feed, async (req, res, { params, query }) => {
    const merchantId = await admin.merchantOf(req, params);
    const page = await read(merchantId, (log) => log.feed(merchantId, query.after as string | undefined, query.limit as number));
    res.json({ message: `${page.events.length} event(s)`, error: null, data: page });
  }, base);
}
