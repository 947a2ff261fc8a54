import express, { type NextFunction, type Request, type Response } from 'express';
import {
  type MerchantDirectory,
  type MerchantSettings,
  type SettingsResult,
  type WriteGuards,
  type Actor,
  EndpointSettings,
  endpointInputSchema,
  endpointPatchSchema,
  firstIssue,
  listAudit,
  merchantInputSchema,
  merchantPatchSchema,
  rotateInputSchema,
  viewOf,
  withCurrentRate,
  withEndpointRate,
} from '../../libs/merchants/index.js';
import type { Logger } from '../../libs/logger/index.js';
import type { Queryable } from '../../libs/delivery-store/index.js';
import type { Authenticator } from './auth.js';
import { ApiError, badRequest, notFound } from './errors.js';
import { methodsNotAllowed, mount } from './mount.js';
import { AUDIT_PAGE_LIMIT } from './routes.js';

export interface AdminDeps {
  auth: Authenticator;
  /** Every directory can be read. */
  merchants: MerchantDirectory;
  /** Only the database directory can be written (not MERCHANTS_FILE). */
  settings?: MerchantSettings;
  logger: Logger;
  /** The merchants' database, where the audit trail is; absent with MERCHANTS_FILE. */
  audit?: Queryable;
  /** More admin routes on the same authenticated router (the delivery log's). */
  extend?: (router: express.Router) => void;
}

/**
 * The admin API for the dashboard's backend: a merchant created, read and changed, and its
 * endpoints one at a time (each with its own secret, rotated alone). Bearer JWT with the
 * webhooks:admin scope; the spec's envelope for every answer. Writes accept an Idempotency-Key (kept in PostgreSQL, so any replica answers it) and
 * If-Match with the ETag of a GET (the merchant's version: 412 when someone changed it since).
 * Paths and inputs are declared in routes.ts; domain errors become answers in translate.ts.
 */
export function adminRouter(deps: AdminDeps): express.Router {
  const router = express.Router();
  const base = '/admin';

  router.use(async (req: Request, res: Response, next: NextFunction) => {
    try {
      const token = await deps.auth.authorizeAdmin(req.get('authorization'));
      // Who, for the audit trail: the admin token's subject (the dashboard's backend, an operator).
      res.locals.actor = { actor: `admin:${String(token.sub ?? 'unknown').slice(0, 200)}`, address: req.ip };
      next();
    } catch (err) {
      next(err);
    }
  });

  mount(router, 'getMerchant', async (_req, res, { params }) => {
    const merchantId = params.merchantId as string;
    const merchant = deps.merchants.byId(merchantId);
    if (!merchant) throw notFound('merchant_not_found', `No merchant ${merchantId}`);
    const version = deps.settings?.versionOf(merchantId);
    if (version !== undefined) res.set('etag', `"${version}"`);
    res.json({ message: `merchant ${merchantId}`, error: null, data: await withCurrentRate(deps.audit, viewOf(merchant, new Date())) });
  }, base);

  mount(router, 'putMerchant', async (req, res, { params }) => {
    const merchantId = params.merchantId as string;
    const settings = writable(deps);
    const input = merchantInputSchema.safeParse(req.body ?? {});
    if (!input.success) throw firstIssue(input.error);
    const written = await settings.put(merchantId, input.data, guardsOf(req, res));
    deps.logger.info('merchant settings saved through the admin API', { merchantId, created: written.created, replayed: written.replayed });
    sendSettings(res, merchantId, { ...written, view: await withCurrentRate(deps.audit, written.view) });
  }, base);

  mount(router, 'patchMerchant', async (req, res, { params }) => {
    const merchantId = params.merchantId as string;
    const settings = writable(deps);
    const patch = merchantPatchSchema.safeParse(req.body ?? {});
    if (!patch.success) throw firstIssue(patch.error);
    const written = await settings.patch(merchantId, patch.data, guardsOf(req, res));
    deps.logger.info('merchant settings changed through the admin API', { merchantId, replayed: written.replayed });
    sendSettings(res, merchantId, { ...written, view: await withCurrentRate(deps.audit, written.view) });
  }, base);

  mount(router, 'getMerchantAudit', async (_req, res, { params, query }) => {
    const merchantId = params.merchantId as string;
    if (!deps.audit) throw new ApiError(409, 'directory_read_only', 'Merchants come from MERCHANTS_FILE here: nothing is written, so nothing is audited');
    const entries = await listAudit(deps.audit, merchantId, (query.limit as number | undefined) ?? AUDIT_PAGE_LIMIT.default, query.before as string | undefined);
    res.json({ message: `${entries.length} audit entr${entries.length === 1 ? 'y' : 'ies'} of merchant ${merchantId}`, error: null, data: { entries, nextBefore: entries.at(-1)?.id ?? null } });
  }, base);

  mountEndpoints(router, deps, base);
  deps.extend?.(router);
  methodsNotAllowed(router, base);
  return router;
}

/** A merchant's endpoints, one at a time (endpoint-routes.ts): each write is a write of the merchant. */
function mountEndpoints(router: express.Router, deps: AdminDeps, base: string): void {
  const endpoints = () => new EndpointSettings(writable(deps));
  const ids = (params: Record<string, unknown>) => ({ merchantId: params.merchantId as string, endpointId: params.endpointId as string });
  const answer = (res: Response, status: number, message: string, data: unknown, written?: { version: number; replayed: boolean }) => {
    const version = written?.version;
    if (version !== undefined) res.set('etag', `"${version}"`);
    if (written?.replayed) res.set('idempotent-replayed', 'true');
    res.status(status).json({ message, error: null, data });
  };
  const etag = (res: Response, merchantId: string) => {
    const version = deps.settings?.versionOf(merchantId);
    if (version !== undefined) res.set('etag', `"${version}"`);
  };

  mount(router, 'listEndpoints', async (_req, res, { params }) => {
    const merchantId = params.merchantId as string;
    const views = endpoints().list(merchantId);
    etag(res, merchantId);
    answer(res, 200, `${views.length} endpoint${views.length === 1 ? '' : 's'} of merchant ${merchantId}`, { endpoints: await Promise.all(views.map((view) => withEndpointRate(deps.audit, merchantId, view))) });
  }, base);

  mount(router, 'getEndpoint', async (_req, res, { params }) => {
    const { merchantId, endpointId } = ids(params);
    const view = endpoints().get(merchantId, endpointId);
    etag(res, merchantId);
    answer(res, 200, `endpoint ${endpointId} of merchant ${merchantId}`, await withEndpointRate(deps.audit, merchantId, view));
  }, base);

  mount(router, 'createEndpoint', async (req, res, { params }) => {
    const merchantId = params.merchantId as string;
    const input = endpointInputSchema.safeParse(req.body ?? {});
    if (!input.success) throw firstIssue(input.error);
    const written = await endpoints().create(merchantId, input.data, guardsOf(req, res));
    deps.logger.info('endpoint created through the admin API', { merchantId, endpointId: written.view.id, replayed: written.replayed });
    answer(res, 201, `endpoint ${written.view.id} of merchant ${merchantId} created`, { ...written.view, secret: written.secret }, written);
  }, base);

  mount(router, 'patchEndpoint', async (req, res, { params }) => {
    const { merchantId, endpointId } = ids(params);
    const patch = endpointPatchSchema.safeParse(req.body ?? {});
    if (!patch.success) throw firstIssue(patch.error);
    const written = await endpoints().patch(merchantId, endpointId, patch.data, guardsOf(req, res));
    deps.logger.info('endpoint changed through the admin API', { merchantId, endpointId, replayed: written.replayed });
    answer(res, 200, `endpoint ${endpointId} of merchant ${merchantId} updated`, await withEndpointRate(deps.audit, merchantId, written.view), written);
  }, base);

  mount(router, 'deleteEndpoint', async (req, res, { params }) => {
    const { merchantId, endpointId } = ids(params);
    const written = await endpoints().delete(merchantId, endpointId, guardsOf(req, res));
    deps.logger.info('endpoint deleted through the admin API', { merchantId, endpointId, replayed: written.replayed });
    answer(res, 200, `endpoint ${endpointId} of merchant ${merchantId} deleted`, { deleted: written.deleted }, written);
  }, base);

  mount(router, 'rotateEndpointSecret', async (req, res, { params }) => {
    const { merchantId, endpointId } = ids(params);
    const input = rotateInputSchema.safeParse(req.body ?? {});
    if (!input.success) throw firstIssue(input.error);
    const { replayed, version, ...rotated } = await endpoints().rotate(merchantId, endpointId, input.data.graceSeconds, guardsOf(req, res));
    deps.logger.info('endpoint secret rotated', { merchantId, endpointId, previousSecretExpiresAt: rotated.previousSecretExpiresAt, replayed });
    answer(res, 200, `secret of endpoint ${endpointId} of merchant ${merchantId} rotated`, rotated, { version, replayed });
  }, base);
}

/** The answer to a PUT or PATCH; a replayed one is the first answer again. */
function sendSettings(res: Response, merchantId: string, written: SettingsResult & { replayed: boolean; version: number }): void {
  const { view, created } = written;
  res.set('etag', `"${written.version}"`);
  if (written.replayed) res.set('idempotent-replayed', 'true');
  res.status(created ? 201 : 200).json({ message: `merchant ${merchantId} ${created ? 'created' : 'updated'}`, error: null, data: view });
}

/** Idempotency-Key given once, or not at all (MerchantSettings checks its form); If-Match as a version. */
function guardsOf(req: Request, res: Response): WriteGuards {
  const key = req.headers['idempotency-key'];
  if (Array.isArray(key)) throw badRequest('invalid_idempotency_key', 'Give the Idempotency-Key header once');
  const actor = res.locals.actor as Actor;
  const ifMatch = req.get('if-match');
  if (ifMatch === undefined) return { idempotencyKey: key, actor };
  // An ETag this service did not give matches no version: 412, as RFC 9110 says.
  const match = /^\s*(?:W\/)?"(\d{1,15})"\s*$/.exec(ifMatch);
  return { idempotencyKey: key, ifVersion: match ? Number(match[1]) : -1, actor };
}

function writable(deps: AdminDeps): MerchantSettings {
  if (!deps.settings) {
    throw new ApiError(409, 'directory_read_only', 'Merchant settings come from MERCHANTS_FILE here; edit the file');
  }
  return deps.settings;
}
