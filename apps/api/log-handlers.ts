import type { Request, Router } from 'express';
import type { DeliveryLogQueries } from '../../libs/delivery-store/index.js';
import { ApiError, notFound } from './errors.js';
import { mount } from './mount.js';

export interface LogHandlerDeps {
  /** Absent with DELIVERY_LOG=off: the routes answer 503 log_disabled. */
  log?: DeliveryLogQueries;
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

  mount(router, ids.list, async (req, res, { params, query }) => {
    const merchantId = await admin.merchantOf(req, params);
    const page = await queries(deps).listWebhooks(merchantId, {
      reference: query.reference as string | undefined,
      event: query.event as string | undefined,
      status: query.status as string | undefined,
      since: query.since as string | undefined,
      until: query.until as string | undefined,
      cursor: query.cursor as string | undefined,
      limit: query.limit as number,
    });
    res.json({ message: `${page.webhooks.length} webhook(s)`, error: null, data: page });
  }, base);

  mount(router, ids.get, async (req, res, { params }) => {
    const merchantId = await admin.merchantOf(req, params);
    const webhookId = params.webhookId as string;
    const webhook = await queries(deps).getWebhook(merchantId, webhookId);
    if (!webhook) throw notFound('webhook_not_found', `No webhook ${webhookId.slice(0, 200)} in the delivery log`);
    res.json({ message: `webhook ${webhookId}`, error: null, data: webhook });
  }, base);

  mount(router, ids.feed, async (req, res, { params, query }) => {
    const merchantId = await admin.merchantOf(req, params);
    const page = await queries(deps).feed(merchantId, query.after as string | undefined, query.limit as number);
    res.json({ message: `${page.events.length} event(s)`, error: null, data: page });
  }, base);
}
