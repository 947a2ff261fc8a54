import express, { type NextFunction, type Request, type Response } from 'express';
import helmet from 'helmet';
import { Counter, type Registry } from 'prom-client';
import type { DeliveryLogQueries, LogHealthState, Queryable } from '../../libs/delivery-store/index.js';
import type { ResendService } from '../../libs/failed/index.js';
import { isWellFormedReference } from '../../libs/contracts/index.js';
import type { Logger } from '../../libs/logger/index.js';
import { type MerchantDirectory, type MerchantSettings } from '../../libs/merchants/index.js';
import { METRIC_NAMES } from '../../libs/metrics/index.js';
import type { SchemaWaitState } from '../../libs/migrations/index.js';
import { adminRouter } from './admin.js';
import { docsRouter } from './docs.js';
import type { Authenticator } from './auth.js';
import { ApiError, badRequest, errorBody, notFound, rateLimited, unavailable } from './errors.js';
import { mountLogRoutes } from './log-handlers.js';
import { methodsNotAllowed, mount } from './mount.js';
import { openApiDocument } from './openapi.js';
import type { KeyedConcurrency } from './concurrency.js';
import type { RateLimiter } from './rate-limit.js';
import { toApiError } from './translate.js';
import type { PortalDeps } from './portal/deps.js';
import { auditMerchantResend, mountPortal, mountPortalAdmin, mountResendById } from './portal/handlers.js';
import { traceRequests } from './tracing.js';

/** The largest JSON request body any route takes (express's notation: 16 KiB); more answers 413 body_too_large. */
export const REQUEST_BODY_LIMIT = '16kb';

export interface ApiDeps {
  auth: Authenticator;
  resend: ResendService;
  limiter: RateLimiter;
  /**
   * The portal's writes, per merchant, apart from its API budget: endpoint changes and rotations
   * (`settings`), test events (`tests`). Shared by the replicas, as the resend limit.
   */
  portalLimits?: { settings: RateLimiter; tests: RateLimiter; recover: RateLimiter; address?: RateLimiter };
  /** Express's `trust proxy` (TRUST_PROXY): which proxies may name the client in X-Forwarded-For; none when unset. */
  trustProxy?: number | string[];
  logger: Logger;
  brokerConnected: () => boolean;
  registry?: Registry;
  /** Serve /metrics on this app's port (false when METRICS_PORT gives it a port of its own). */
  serveMetrics?: boolean;
  /** The admin API reads merchants here and writes them through settings (not with MERCHANTS_FILE). */
  merchants?: MerchantDirectory;
  settings?: MerchantSettings;
  /** The merchants' database, where the audit trail is written and read; absent with MERCHANTS_FILE. */
  audit?: Queryable;
  /** Serve /admin on this app's port (false when ADMIN_PORT gives it a port of its own: createAdminApp). */
  serveAdmin?: boolean;
  /** The delivery log's reads; absent with DELIVERY_LOG=off. */
  log?: DeliveryLogQueries;
  /** Per merchant: log reads per minute, and log reads in flight at once. */
  logLimiter?: RateLimiter;
  logConcurrency?: KeyedConcurrency;
  logHealth?: () => LogHealthState;
  /** Whether PostgreSQL answered its last check (every few seconds, on a connection of its own). */
  databaseReachable?: () => boolean;
  /** What the schema check still waits for (with MERCHANTS_FILE it runs beside the API); none once it passed. */
  schemaWaiting?: () => SchemaWaitState;
  /** Merchants whose newest row this replica cannot open (sealed with a key it lacks): it is not ready while there are any. */
  merchantsUnreadable?: () => number;
  /** The merchant portal (/portal/ and /portal/api/...), on the public port only. */
  portal?: PortalDeps;
}


function baseApp(trustProxy: ApiDeps['trustProxy']): express.Express {
  const app = express();
  app.disable('x-powered-by');
  // req.ip: the peer of the connection, or with TRUST_PROXY the client a trusted proxy names.
  app.set('trust proxy', trustProxy ?? false);
  app.set('query parser', 'simple');
  app.use(traceRequests);
  app.use(helmet());
  app.use(express.json({ limit: REQUEST_BODY_LIMIT, strict: false, type: ['application/json', 'application/*+json'] }));
  // Admin answers carry secrets (a new webhook's, a rotation's, their replays) and /nucleus reads
  // carry payloads: no cache, shared or the browser's, keeps any of them (/portal/api does the same).
  app.use(['/admin', '/nucleus'], (_req, res, next) => {
    res.set('cache-control', 'no-store');
    next();
  });
  return app;
}

/** Unknown routes and every error, in the envelope: the last handlers of both apps. */
function finish(app: express.Express, logger: Logger): express.Express {
  app.use((_req, _res, next) => {
    next(notFound('route_not_found', 'No such endpoint'));
  });

  // Express needs the four-argument signature to treat this as the error handler.
  app.use((err: unknown, _req: Request, res: Response, _next: NextFunction) => {
    const error = toApiError(err, logger);
    res.status(error.status).set(error.headers).json(errorBody(error));
  });
  return app;
}

const adminOf = (deps: ApiDeps, merchants: MerchantDirectory) =>
  adminRouter({
    auth: deps.auth,
    merchants,
    settings: deps.settings,
    audit: deps.audit,
    logger: deps.logger,
    extend: (router) => {
      mountLogRoutes(router, deps, { base: '/admin', merchantOf: async (_req, params) => params.merchantId as string });
      mountPortalAdmin(router, deps);
    },
  });

/** The admin API alone, for ADMIN_PORT, so that the merchant-facing port need not expose it. */
export function createAdminApp(deps: ApiDeps & { merchants: MerchantDirectory }): express.Express {
  const app = baseApp(deps.trustProxy);
  app.use('/admin', adminOf(deps, deps.merchants));
  return finish(app, deps.logger);
}

export function createApp(deps: ApiDeps): express.Express {
  const app = baseApp(deps.trustProxy);

  app.get('/healthz', (_req, res) => {
    res.json({ status: 'ok' });
  });

  app.get('/readyz', (_req, res) => {
    // Ready when the broker and the database are reachable (DESIGN.md): resends, the log and the
    // portal need PostgreSQL, and a replica without it would only answer them 503.
    const broker = deps.brokerConnected();
    const database = deps.databaseReachable?.() ?? true;
    const schema = deps.schemaWaiting?.() ?? {};
    const unreadable = deps.merchantsUnreadable?.() ?? 0;
    const ready = broker && database && !schema.waiting && unreadable === 0;
    res.status(ready ? 200 : 503).json({
      status: ready ? 'ready' : 'not ready',
      broker: broker ? 'connected' : 'disconnected',
      database: database ? 'reachable' : 'unreachable',
      ...(unreadable > 0 ? { merchants: `${unreadable} merchant row(s) sealed with a key this replica lacks (SECRETS_KEY, SECRETS_KEY_PREVIOUS): served at their last readable version` } : {}),
      deliveryLog: deps.logHealth ? deps.logHealth() : { database: 'off', behindSeconds: null },
      ...(schema.waiting === 'schema' && { waitingFor: 'the database schema', detail: schema.detail }),
    });
  });

  app.get('/openapi.json', (_req, res) => {
    res.json(openApiDocument);
  });
  app.use(docsRouter());

  const registry = deps.registry;
  if (registry && deps.serveMetrics !== false) {
    app.get('/metrics', async (_req, res) => {
      res.type(registry.contentType).send(await registry.metrics());
    });
  }
  const resends = registry
    ? new Counter({ name: METRIC_NAMES.resends, help: 'Resend API answers by HTTP status', labelNames: ['status'], registers: [registry] })
    : undefined;
  // The answers a resend can get, at 0 from start-up: the dashboard's panel reads 0, not "No data".
  for (const status of ['200', '400', '401', '403', '404', '409', '429', '503']) resends?.inc({ status }, 0);
  const countResends = (req: Request, res: Response, next: NextFunction) => {
    if (req.method === 'POST') res.on('finish', () => resends?.inc({ status: String(res.statusCode) }));
    next();
  };

  app.use('/nucleus/tnx/webhook', countResends);
  // The resend of one webhook by id (the portal's Resend and Recover call it) is a resend as well.
  app.use(/^\/nucleus\/webhooks\/[^/]+\/resend$/, countResends);
  mount(app, 'resendWebhook', async (req, res) => {
    {
      const reference = referenceFrom(req);
      const merchant = await deps.auth.authenticate(req.get('x-auth-token'), req.get('authorization'));
      const allowed = await deps.limiter.take(merchant.id);
      if (!allowed.ok) throw rateLimited(allowed.retryAfterSeconds);
      if (!deps.brokerConnected()) throw unavailable('The message broker is unavailable; try again shortly');
      // The resend checks the merchant's webhook (on, receiving the event) before it claims anything.
      const resent = await deps.resend.resend(merchant, reference);
      await auditMerchantResend(deps, req, merchant.id, { reference, resent });
      res.status(200).json({ message: `webhook sent for reference ${reference}`, error: null, data: null });
    }
  }, '', true);
  mountLogRoutes(app, deps, {
    merchantOf: async (req) => {
      return (await deps.auth.authenticate(req.get('x-auth-token'), req.get('authorization'))).id;
    },
  });
  mountResendById(app, deps);
  mountPortal(app, deps);
  methodsNotAllowed(app, '', (declared) => declared.path.startsWith('/nucleus/') || declared.path.startsWith('/portal/'));

  if (deps.merchants && deps.serveAdmin !== false) app.use('/admin', adminOf(deps, deps.merchants));
  return finish(app, deps.logger);
}

function referenceFrom(req: Request): string {
  const query = req.query as Record<string, unknown>;
  const unknown = Object.keys(query).filter((k) => k !== 'reference');
  if (unknown.length > 0) throw badRequest('unknown_parameter', `Unknown query parameter: ${unknown[0]!.slice(0, 50)}`);
  const reference = query.reference;
  if (reference === undefined || reference === '') throw badRequest('missing_reference', 'The reference query parameter is required');
  if (typeof reference !== 'string') throw badRequest('invalid_reference', 'Give the reference query parameter once');
  if (!isWellFormedReference(reference)) {
    throw badRequest('invalid_reference', 'The reference must be 1 to 200 characters without control characters');
  }
  return reference;
}
