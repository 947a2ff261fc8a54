import express, { type NextFunction, type Request, type Response } from 'express';
import helmet from 'helmet';
import { Counter, type Registry } from 'prom-client';
import { BrokerUnavailableError } from '../../libs/broker/index.js';
import { type FailedIndex, NothingToResendError, type ResendService } from '../../libs/failed/index.js';
import { isWellFormedReference } from '../../libs/contracts/index.js';
import type { Logger } from '../../libs/logger/index.js';
import { activeWebhook, type MerchantDirectory, type MerchantSettings } from '../../libs/merchants/index.js';
import { METRIC_NAMES } from '../../libs/metrics/index.js';
import { adminRouter } from './admin.js';
import type { Authenticator } from './auth.js';
import { ApiError, badRequest, errorBody, notFound, rateLimited, unavailable } from './errors.js';
import { openApiDocument } from './openapi.js';
import type { RateLimiter } from './rate-limit.js';

export interface ApiDeps {
  auth: Authenticator;
  index: FailedIndex;
  resend: ResendService;
  limiter: RateLimiter;
  logger: Logger;
  brokerConnected: () => boolean;
  registry?: Registry;
  /** Serve /metrics on this app's port (false when METRICS_PORT gives it a port of its own). */
  serveMetrics?: boolean;
  /** The admin API reads merchants here and writes them through settings (broker directory only). */
  merchants?: MerchantDirectory;
  settings?: MerchantSettings;
  /** False while the broker directory is still reading the merchants stream. */
  merchantsReady?: () => boolean;
}


export function createApp(deps: ApiDeps): express.Express {
  const app = express();
  app.disable('x-powered-by');
  app.set('query parser', 'simple');
  app.use(helmet());
  app.use(express.json({ limit: '16kb', strict: false, type: ['application/json', 'application/*+json'] }));

  app.get('/healthz', (_req, res) => {
    res.json({ status: 'ok' });
  });

  app.get('/readyz', (_req, res) => {
    const broker = deps.brokerConnected();
    const index = deps.index.ready;
    const merchants = deps.merchantsReady?.() ?? true;
    const ready = broker && index && merchants;
    res.status(ready ? 200 : 503).json({
      status: ready ? 'ready' : 'not ready',
      broker: broker ? 'connected' : 'disconnected',
      index: index ? 'caught up' : 'replaying',
      merchants: merchants ? 'caught up' : 'replaying',
      unresolved: deps.index.size,
    });
  });

  app.get('/openapi.json', (_req, res) => {
    res.json(openApiDocument);
  });

  const registry = deps.registry;
  if (registry && deps.serveMetrics !== false) {
    app.get('/metrics', async (_req, res) => {
      res.type(registry.contentType).send(await registry.metrics());
    });
  }
  const resends = registry
    ? new Counter({ name: METRIC_NAMES.resends, help: 'Resend API answers by HTTP status', labelNames: ['status'], registers: [registry] })
    : undefined;
  const countResends = (_req: Request, res: Response, next: NextFunction) => {
    res.on('finish', () => resends?.inc({ status: String(res.statusCode) }));
    next();
  };

  app.post('/nucleus/tnx/webhook', countResends, async (req: Request, res: Response, next: NextFunction) => {
    try {
      const reference = referenceFrom(req);
      // A merchant the directory has not read yet is not unknown: say "try again", never 401.
      if (deps.merchantsReady && !deps.merchantsReady()) throw unavailable('The merchant directory is still loading; try again shortly');
      const merchant = await deps.auth.authenticate(req.get('x-auth-token'), req.get('authorization'));
      const allowed = deps.limiter.take(merchant.id);
      if (!allowed.ok) throw rateLimited(allowed.retryAfterSeconds);
      if (!deps.index.ready || !deps.brokerConnected()) {
        throw unavailable('The failed queue is not available yet; try again shortly');
      }
      // Resending to a webhook that is off would only fail again: say so, and keep the entry.
      if (!activeWebhook(merchant)) {
        throw new ApiError(409, 'webhook_disabled', 'Webhooks are not enabled for this merchant; enable them on the dashboard, then resend');
      }
      await deps.resend.resend(merchant.id, reference);
      res.status(200).json({ message: `webhook sent for reference ${reference}`, error: null, data: null });
    } catch (err) {
      next(err);
    }
  });

  app.all('/nucleus/tnx/webhook', (_req, _res, next) => {
    next(new ApiError(405, 'method_not_allowed', 'Use POST for this endpoint', { allow: 'POST' }));
  });

  if (deps.merchants) {
    app.use('/admin', adminRouter({ auth: deps.auth, merchants: deps.merchants, settings: deps.settings, ready: deps.merchantsReady, logger: deps.logger }));
  }

  app.use((_req, _res, next) => {
    next(notFound('route_not_found', 'No such endpoint'));
  });

  // Express needs the four-argument signature to treat this as the error handler.
  app.use((err: unknown, _req: Request, res: Response, _next: NextFunction) => {
    const error = toApiError(err, deps.logger);
    res.status(error.status).set(error.headers).json(errorBody(error));
  });
  return app;
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

function toApiError(err: unknown, logger: Logger): ApiError {
  if (err instanceof ApiError) return err;
  if (err instanceof NothingToResendError) return notFound('not_found', 'No failed webhook for this reference');
  if (err instanceof BrokerUnavailableError) return unavailable('The message broker is unavailable; try again shortly');
  const status = (err as { status?: number; statusCode?: number })?.status ?? (err as { statusCode?: number })?.statusCode;
  const type = (err as { type?: string })?.type;
  if (type === 'entity.parse.failed') return new ApiError(400, 'invalid_body', 'The request body is not valid JSON');
  if (type === 'entity.too.large') return new ApiError(413, 'body_too_large', 'The request body is too large');
  if (typeof status === 'number' && status >= 400 && status < 500) {
    return new ApiError(status, 'bad_request', 'The request could not be read');
  }
  logger.error('resend request failed', { error: (err as Error)?.message });
  return new ApiError(500, 'internal_error', 'Something went wrong on our side');
}
