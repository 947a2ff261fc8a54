import express, { type NextFunction, type Request, type Response } from 'express';
import {
  type WriteGuards,
  type Actor,
  EndpointSettings,
  endpointInputSchema,
  directoryNow,
  endpointViewsOf,
  endpointPatchSchema,
  isUnavailable,
  listAudit,
  MerchantStoreUnavailableError,
  merchantInputSchema,
  merchantPatchSchema,
  rotateInputSchema,
  viewOf,
  withCurrentRate,
  withEndpointRates,
} from '../../libs/merchants/index.js';
import type { ApiDeps } from './deps.js';
import { badRequest, notFound } from './errors.js';
import { mountLogRoutes } from './log-handlers.js';
import { bodyOf, methodsNotAllowed, mount } from './mount.js';
import { mountPortalAdmin } from './portal/handlers.js';
import { AUDIT_PAGE_LIMIT } from './routes.js';

/** The admin API for the dashboard's backend and operators: a Bearer JWT with the webhooks:admin scope. */
export function adminRouter(deps: ApiDeps): express.Router {
  const router = express.Router();
  const base = '/admin';

  // A rejection goes to the error handler: express 5 passes it to next().
  router.use(async (req: Request, res: Response, next: NextFunction) => {
    const token = await deps.auth.authorizeAdmin(req.get('authorization'));
    // Who, for the audit trail: the admin token's subject (the dashboard's backend, an operator). Its
    // control characters replaced: PostgreSQL refuses a NUL in text, and the write would fail with it.
    const sub = String(token.sub ?? 'unknown').slice(0, 200).replace(/[\u0000-\u001f\u007f]/g, '\uFFFD');
    res.locals.actor = { actor: `admin:${sub}`, address: req.ip };
    next();
  });

  mount(router, 'getMerchant', async (_req, res, { params: { merchantId } }) => {
    const merchant = deps.merchants.byId(merchantId);
    if (!merchant) throw notFound('merchant_not_found', `No merchant ${merchantId}`);
    // The version of this body, read with it: after the rates' query a write heard meanwhile would give a newer one.
    const version = deps.settings.versionOf(merchantId);
    send(res, 200, `merchant ${merchantId}`, await withCurrentRate(deps.audit, viewOf(merchant, directoryNow(deps.merchants))), version);
  }, base);

  mount(router, 'putMerchant', async (req, res, { params: { merchantId } }) => {
    const written = await deps.settings.put(merchantId, bodyOf(merchantInputSchema, req), guardsOf(req, res));
    deps.logger.info('merchant settings saved through the admin API', { merchantId, created: written.created, replayed: written.replayed });
    const message = `merchant ${merchantId} ${written.created ? 'created' : 'updated'}`;
    send(res, written.created ? 201 : 200, message, await withCurrentRate(deps.audit, written.view), written.version, written.replayed);
  }, base);

  mount(router, 'patchMerchant', async (req, res, { params: { merchantId } }) => {
    const written = await deps.settings.patch(merchantId, bodyOf(merchantPatchSchema, req), guardsOf(req, res));
    deps.logger.info('merchant settings changed through the admin API', { merchantId, replayed: written.replayed });
    send(res, 200, `merchant ${merchantId} updated`, await withCurrentRate(deps.audit, written.view), written.version, written.replayed);
  }, base);

  mount(router, 'getMerchantAudit', async (_req, res, { params: { merchantId }, query }) => {
    const entries = await listAudit(deps.audit, merchantId, query.limit ?? AUDIT_PAGE_LIMIT.default, query.before).catch((err: unknown) => {
      throw isUnavailable(err) ? new MerchantStoreUnavailableError(err) : err;
    });
    res.json({ message: `${entries.length} audit entr${entries.length === 1 ? 'y' : 'ies'} of merchant ${merchantId}`, error: null, data: { entries, nextBefore: entries.at(-1)?.id ?? null } });
  }, base);

  mountEndpoints(router, deps, base);
  mountLogRoutes(router, deps, true);
  mountPortalAdmin(router, deps);
  methodsNotAllowed(router, base);
  return router;
}

/** A merchant's endpoints, one at a time (routes.ts): each write is a write of the merchant. */
function mountEndpoints(router: express.Router, deps: ApiDeps, base: string): void {
  const endpoints = () => new EndpointSettings(deps.settings);
  const versionOf = (merchantId: string) => deps.settings.versionOf(merchantId);
  // Reads from the directory this replica holds, as the merchant's own GET.
  const shown = (merchantId: string, endpointId?: string) => endpointViewsOf(deps.merchants.byId(merchantId), merchantId, directoryNow(deps.merchants), endpointId);

  // A GET's ETag is read with its body, before the rates' query: read after it, a write heard
  // meanwhile gave the old body a newer version, and an If-Match with it overwrote a change never seen.
  mount(router, 'listEndpoints', async (_req, res, { params: { merchantId } }) => {
    const views = shown(merchantId);
    const version = versionOf(merchantId);
    const data = { endpoints: await withEndpointRates(deps.audit, merchantId, views) };
    send(res, 200, `${views.length} endpoint${views.length === 1 ? '' : 's'} of merchant ${merchantId}`, data, version);
  }, base);

  mount(router, 'getEndpoint', async (_req, res, { params: { merchantId, endpointId } }) => {
    const views = shown(merchantId, endpointId);
    const version = versionOf(merchantId);
    const [view] = await withEndpointRates(deps.audit, merchantId, views);
    send(res, 200, `endpoint ${endpointId} of merchant ${merchantId}`, view, version);
  }, base);

  mount(router, 'createEndpoint', async (req, res, { params: { merchantId } }) => {
    const written = await endpoints().create(merchantId, bodyOf(endpointInputSchema, req), guardsOf(req, res));
    deps.logger.info('endpoint created through the admin API', { merchantId, endpointId: written.view.id, replayed: written.replayed });
    send(res, 201, `endpoint ${written.view.id} of merchant ${merchantId} created`, { ...written.view, secret: written.secret }, written.version, written.replayed);
  }, base);

  mount(router, 'patchEndpoint', async (req, res, { params: { merchantId, endpointId } }) => {
    const written = await endpoints().patch(merchantId, endpointId, bodyOf(endpointPatchSchema, req), guardsOf(req, res));
    deps.logger.info('endpoint changed through the admin API', { merchantId, endpointId, replayed: written.replayed });
    const [view] = await withEndpointRates(deps.audit, merchantId, [written.view]);
    send(res, 200, `endpoint ${endpointId} of merchant ${merchantId} updated`, view, written.version, written.replayed);
  }, base);

  mount(router, 'deleteEndpoint', async (req, res, { params: { merchantId, endpointId } }) => {
    const written = await endpoints().delete(merchantId, endpointId, guardsOf(req, res));
    deps.logger.info('endpoint deleted through the admin API', { merchantId, endpointId, replayed: written.replayed });
    send(res, 200, `endpoint ${endpointId} of merchant ${merchantId} deleted`, { deleted: written.deleted }, written.version, written.replayed);
  }, base);

  mount(router, 'rotateEndpointSecret', async (req, res, { params: { merchantId, endpointId } }) => {
    const input = bodyOf(rotateInputSchema, req);
    const { replayed, version, ...rotated } = await endpoints().rotate(merchantId, endpointId, input.graceSeconds, guardsOf(req, res));
    deps.logger.info('endpoint secret rotated', { merchantId, endpointId, previousSecretExpiresAt: rotated.previousSecretExpiresAt, replayed });
    send(res, 200, `secret of endpoint ${endpointId} of merchant ${merchantId} rotated`, rotated, version, replayed);
  }, base);
}

/** An answer in the envelope, with the merchant's version as its ETag; a replayed write is the first answer again. */
function send(res: Response, status: number, message: string, data: unknown, version?: number, replayed = false): void {
  if (version !== undefined) res.set('etag', `"${version}"`);
  if (replayed) res.set('idempotent-replayed', 'true');
  res.status(status).json({ message, error: null, data });
}

/** Idempotency-Key given once, or not at all (MerchantSettings checks its form); If-Match as a version. */
function guardsOf(req: Request, res: Response): WriteGuards {
  const key = req.headers['idempotency-key'];
  if (Array.isArray(key)) throw badRequest('invalid_idempotency_key', 'Give the Idempotency-Key header once');
  const actor = res.locals.actor as Actor;
  const ifMatch = req.get('if-match');
  if (ifMatch === undefined) return { idempotencyKey: key, actor };
  // RFC 9110: any current version, so the merchant must exist (a PUT that only replaces).
  if (ifMatch.trim() === '*') return { idempotencyKey: key, ifVersion: '*', actor };
  // An ETag this service did not give matches no version: 412, as RFC 9110 says. Compared strongly, as If-Match is:
  // a weak tag (W/"7") or another spelling of the number ("007") is not one this service gave.
  const match = /^\s*"(0|[1-9]\d{0,14})"\s*$/.exec(ifMatch);
  return { idempotencyKey: key, ifVersion: match ? Number(match[1]) : -1, actor };
}

