import type { Request, Router } from 'express';
import type { z } from 'zod';
import type { DeliveryLogQueries, WebhookFilters } from '../../libs/delivery-store/index.js';
import type { ApiDeps } from './deps.js';
import type { listQuery } from './log-routes.js';
import { ApiError, notFound } from './errors.js';
import { take } from './rate-limit.js';
import { mount } from './mount.js';

/** The list's filters as the route table parsed them: listQuery's output is a WebhookFilters. */
export function listFilters(query: Record<string, unknown>): WebhookFilters {
  return query as z.output<typeof listQuery>;
}

/** A read of the log counted against `key`: the merchant id (its API and its portal together), or an operator's. */
export async function readLog<T>(deps: ApiDeps, key: string, work: (log: DeliveryLogQueries) => Promise<T>): Promise<T> {
  const log = deps.log;
  if (!log) throw new ApiError(503, 'log_disabled', 'The delivery log is switched off on this service (DELIVERY_LOG=off)');
  await take(deps.logLimiter, key, 'delivery log reads');
  return deps.logConcurrency.run(key, () => work(log));
}

/** The delivery log's reads: the merchant's own (/nucleus), or any merchant's (/admin, behind the admin router's auth). */
export function mountLogRoutes(router: Router, deps: ApiDeps, isAdmin: boolean): void {
  const base = isAdmin ? '/admin' : '';
  // An operator's reads count apart, so that support does not use up the merchant's.
  const reader = async (req: Request, params: Record<string, unknown>) => {
    const merchantId = isAdmin ? (params.merchantId as string) : (await deps.auth.authenticate(req.get('x-auth-token'), req.get('authorization'))).id;
    return { merchantId, key: isAdmin ? `admin ${merchantId}` : merchantId };
  };
  const ids = isAdmin
    ? ({ list: 'adminListWebhooks', get: 'adminGetWebhook', feed: 'adminListEvents' } as const)
    : ({ list: 'listWebhooks', get: 'getWebhook', feed: 'listEvents' } as const);

  mount(router, ids.list, async (req, res, { params, query }) => {
    const { merchantId, key } = await reader(req, params);
    const page = await readLog(deps, key, (log) => log.listWebhooks(merchantId, listFilters(query)));
    res.json({ message: `${page.webhooks.length} webhook(s)`, error: null, data: page });
  }, base);

  mount(router, ids.get, async (req, res, { params }) => {
    const { merchantId, key } = await reader(req, params);
    const { webhookId } = params as { webhookId: string };
    const webhook = await readLog(deps, key, (log) => log.getWebhook(merchantId, webhookId));
    if (!webhook) throw notFound('webhook_not_found', `No webhook ${webhookId.slice(0, 200)} in the delivery log`);
    res.json({ message: `webhook ${webhookId}`, error: null, data: webhook });
  }, base);

  mount(router, ids.feed, async (req, res, { params, query }) => {
    const { merchantId, key } = await reader(req, params);
    const page = await readLog(deps, key, (log) => log.feed(merchantId, query.after as string | undefined, query.limit as number));
    res.json({ message: `${page.events.length} event(s)`, error: null, data: page });
  }, base);
}
