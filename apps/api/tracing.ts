import { finished } from 'node:stream';
import type { NextFunction, Request, Response } from 'express';
import { context, SpanStatusCode, trace } from '@opentelemetry/api';
import { ATTR, contextFromHeaders, SpanKind, tracer, tracingActive } from '../../libs/tracing/index.js';

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
