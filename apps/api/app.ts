import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { finished } from 'node:stream';
import { context, SpanStatusCode, trace } from '@opentelemetry/api';
import express, { type NextFunction, type Request, type Response } from 'express';
import helmet from 'helmet';
import { ATTR, contextFromHeaders, SpanKind, tracer, tracingActive } from '../../libs/tracing/index.js';
import { adminRouter } from './admin.js';
import type { ApiDeps } from './deps.js';
import { errorBody, notFound } from './errors.js';
import { mountLogRoutes } from './log-handlers.js';
import { JSON_BODY_TYPES, methodsNotAllowed } from './mount.js';
import { openApiDocument } from './openapi.js';
import { toApiError } from './translate.js';
import { mountPortal } from './portal/handlers.js';
import { mountResends } from './resend-routes.js';

/** The largest JSON request body any route takes (express's notation: 16 KiB); more answers 413 body_too_large. */
export const REQUEST_BODY_LIMIT = '16kb';

/** Both apps: their routes between the middleware every answer goes through and the envelope's error handler. */
function apiApp(deps: ApiDeps, routes: (app: express.Express) => void): express.Express {
  const app = express();
  app.disable('x-powered-by');
  // req.ip: the peer of the connection, or with TRUST_PROXY the client a trusted proxy names.
  app.set('trust proxy', deps.trustProxy ?? false);
  app.set('query parser', 'simple');
  // An answer's ETag is the merchant's version (the admin API), never express's digest of the body:
  // a 412 or a list carrying one would be taken for a version, and no cache may keep these answers.
  app.set('etag', false);
  app.use(traceRequests);
  app.use(helmet());
  app.use(express.json({ limit: REQUEST_BODY_LIMIT, strict: false, type: JSON_BODY_TYPES }));
  // Admin answers carry secrets, /nucleus reads and the portal's API payloads (a secret once): no cache may keep them.
  app.use(['/admin', '/nucleus', '/portal/api'], (_req, res, next) => {
    res.set('cache-control', 'no-store');
    next();
  });
  routes(app);
  app.use((_req, _res, next) => next(notFound('route_not_found', 'No such endpoint')));
  // Express needs the four-argument signature to treat this as the error handler.
  app.use((err: unknown, req: Request, res: Response, _next: NextFunction) => {
    const error = toApiError(err, deps.logger, req.originalUrl.split('?')[0]);
    res.status(error.status).set(error.headers).json(errorBody(error));
  });
  return app;
}

/** The admin API alone, for ADMIN_PORT, so that the merchant-facing port need not expose it. */
export function createAdminApp(deps: ApiDeps): express.Express {
  return apiApp(deps, (app) => app.use('/admin', adminRouter(deps)));
}

export function createApp(deps: ApiDeps): express.Express {
  return apiApp(deps, (app) => {
    app.get('/healthz', (_req, res) => res.json({ status: 'ok' }));

    app.get('/readyz', (_req, res) => {
      // Resends, the log and the portal need PostgreSQL: a replica without it would only answer them 503.
      const broker = deps.brokerConnected();
      const database = deps.databaseReachable();
      const unreadable = deps.merchantsUnreadable();
      const ready = broker && database && unreadable === 0;
      res.status(ready ? 200 : 503).json({
        status: ready ? 'ready' : 'not ready',
        broker: broker ? 'connected' : 'disconnected',
        database: database ? 'reachable' : 'unreachable',
        ...(unreadable > 0 ? { merchants: `${unreadable} merchant row(s) sealed with a key this replica lacks (SECRETS_KEY, SECRETS_KEY_PREVIOUS): served at their last readable version` } : {}),
        deliveryLog: deps.logHealth ? deps.logHealth() : { database: 'off', behindSeconds: null },
      });
    });

    app.get('/openapi.json', (_req, res) => res.json(openApiDocument));
    app.use(docsRouter());
    if (deps.serveMetrics) {
      app.get('/metrics', async (_req, res) => {
        res.type(deps.registry.contentType).send(await deps.registry.metrics());
      });
    }
    mountResends(app, deps);
    mountLogRoutes(app, deps, false);
    mountPortal(app, deps);
    methodsNotAllowed(app, '', (declared) => declared.path.startsWith('/nucleus/') || declared.path.startsWith('/portal/'));
    if (deps.serveAdmin) app.use('/admin', adminRouter(deps));
  });
}

/** A server span per request, named by the route template, never the path: a path may carry a portal token. */
export function traceRequests(req: Request, res: Response, next: NextFunction): void {
  if (!tracingActive()) return next();
  const parent = contextFromHeaders(req.headers as Record<string, unknown>);
  const span = tracer().startSpan(req.method, { kind: SpanKind.SERVER, attributes: { [ATTR.httpMethod]: req.method, [ATTR.urlScheme]: req.protocol } }, parent);
  finished(res, () => {
    const route = (req.route as { path?: unknown } | undefined)?.path;
    if (typeof route === 'string') {
      const template = `${req.baseUrl}${route}`;
      span.setAttribute(ATTR.httpRoute, template);
      span.updateName(`${req.method} ${template}`);
    }
    span.setAttribute(ATTR.httpStatus, res.statusCode);
    if (res.statusCode >= 500) {
      span.setAttribute(ATTR.errorType, String(res.statusCode));
      span.setStatus({ code: SpanStatusCode.ERROR });
    }
    span.end();
  });
  context.with(trace.setSpan(parent, span), next);
}

/** Swagger UI from this process, no CDN: it works offline and under a CSP of 'self' (no inline script). */
const ASSETS = ['swagger-ui-bundle.js', 'swagger-ui.css', 'favicon-32x32.png'];

const PAGE = `<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <title>Nucleus Webhooks: API reference</title>
  <link rel="icon" href="/docs/assets/favicon-32x32.png">
  <link rel="stylesheet" href="/docs/assets/swagger-ui.css">
</head>
<body>
  <main id="reference" aria-label="API reference"></main>
  <script src="/docs/assets/swagger-ui-bundle.js"></script>
  <script src="/docs/assets/init.js"></script>
</body>
</html>
`;

const INIT = `window.ui = SwaggerUIBundle({
  url: '/openapi.json',
  dom_id: '#reference',
  deepLinking: true,
  validatorUrl: null,
  defaultModelsExpandDepth: 0,
});
`;

function docsRouter(): express.Router {
  const dir = dirname(createRequire(import.meta.url).resolve('swagger-ui-dist/package.json'));
  const router = express.Router();
  router.get('/docs', (_req, res) => res.type('html').set('cache-control', 'no-cache').send(PAGE));
  router.get('/docs/assets/init.js', (_req, res) => {
    res.type('application/javascript').set('cache-control', 'no-cache').send(INIT);
  });
  for (const asset of ASSETS) {
    router.get(`/docs/assets/${asset}`, (_req, res) => res.sendFile(join(dir, asset), { maxAge: '1d' }));
  }
  return router;
}
