import { unescape as unescapeQuery } from 'node:querystring';
import type { Request, Response, Router } from 'express';
import type { z } from 'zod';
import { firstIssue } from '../../libs/merchants/index.js';
import { ApiError, badRequest } from './errors.js';
import type { RouteDeclaration } from './route-declaration.js';
import { type OperationId, ROUTES, route as routeOf } from './routes.js';

/** What parse() gives a route's handler: its declared schema's output, else nothing known. */
type Parsed<Id extends OperationId, K extends 'params' | 'query'> =
  Extract<(typeof ROUTES)[number], { operationId: Id }> extends { input: { [P in K]: infer S extends z.ZodType } }
    ? z.output<S>
    : Record<string, unknown>;
type Input<Id extends OperationId> = { params: Parsed<Id, 'params'>; query: Parsed<Id, 'query'> };
type Handler<Id extends OperationId> = (req: Request, res: Response, input: Input<Id>) => Promise<void> | void;

/** The media types express.json reads (app.ts): any other body is never parsed. */
export const JSON_BODY_TYPES = ['application/json', 'application/*+json'];

/** A body left unparsed would be taken as empty: `curl -d` (form-encoded) would change the wrong thing with a 200. */
function checkBodyType(req: Request): void {
  const sent = req.headers['transfer-encoding'] !== undefined || Number(req.headers['content-length'] ?? 0) > 0;
  if (sent && !req.is(JSON_BODY_TYPES)) throw badRequest('invalid_body', 'The body must be JSON, sent with Content-Type: application/json');
}

function expressPath(template: string, base: string): string {
  return template.slice(base.length).replace(/\{([^}]+)\}/g, ':$1');
}

/** 400 unknown_parameter naming the parameter; an empty name (`?=value`, `&=value`) is said as such, not as a blank. */
export function unknownParameter(name: string): ApiError {
  if (name === '') return badRequest('unknown_parameter', 'A query parameter has an empty name (as in "&=value"); remove it');
  return badRequest('unknown_parameter', `Unknown query parameter: ${name.slice(0, 50)}`);
}

const invalidMerchantId = () =>
  badRequest('invalid_merchant_id', 'The merchant id must be 1 to 200 letters, digits, ".", "_", ":" or "-", starting with a letter or digit');

/**
 * A path parameter whose percent-encoding is malformed throws in the router, before any handler: answered
 * with the code parse() gives that parameter, the one the route's documentation lists.
 */
export function undecodableParameter(path: string): ApiError {
  // Express matches a path with a trailing slash too.
  const segments = (path.length > 1 ? path.replace(/\/$/, '') : path).split('/');
  for (const declared of ROUTES as readonly RouteDeclaration[]) {
    const template = declared.path.split('/');
    if (template.length !== segments.length) continue;
    if (!template.every((t, i) => t.startsWith('{') || t === segments[i])) continue;
    const name = template.find((t, i) => t.startsWith('{') && !decodes(segments[i]!));
    if (name === undefined) continue;
    const param = name.slice(1, -1);
    return param === 'merchantId' ? invalidMerchantId() : badRequest('invalid_parameter', `The ${param} path segment is not valid: malformed percent-encoding`);
  }
  return badRequest('invalid_parameter', 'A path segment is not valid: malformed percent-encoding');
}

/**
 * The first query parameter whose percent-encoded bytes are not UTF-8 (`%FF`): the parser would put U+FFFD
 * in their place, another value than the client sent. A `%` without two hex digits stays as it is (`50%off`).
 */
export function undecodableQuery(url: string): string | undefined {
  const at = url.indexOf('?');
  if (at < 0) return undefined;
  for (const pair of url.slice(at + 1).split('&')) {
    const eq = pair.indexOf('=');
    if (eq < 0) continue;
    // Each run of %XX is whole characters: what sits between runs is ASCII.
    const runs = pair.slice(eq + 1).match(/(?:%[0-9A-Fa-f]{2})+/g) ?? [];
    if (!runs.every(decodes)) return unescapeQuery(pair.slice(0, eq));
  }
  return undefined;
}

function decodes(segment: string): boolean {
  try {
    decodeURIComponent(segment);
    return true;
  } catch {
    return false;
  }
}

function parse(schema: z.ZodObject | undefined, value: unknown, where: 'path' | 'query'): Record<string, unknown> {
  if (!schema) return {};
  const result = schema.safeParse(value ?? {});
  if (result.success) return result.data as Record<string, unknown>;
  const issue = result.error.issues[0]!;
  if (issue.code === 'unrecognized_keys') throw unknownParameter(String(issue.keys[0]));
  const name = String(issue.path[0] ?? where);
  if (name === 'merchantId') throw invalidMerchantId();
  const given = (value as Record<string, unknown>)?.[name];
  if (Array.isArray(given)) throw badRequest('invalid_parameter', `Give the ${name} parameter once`);
  throw badRequest('invalid_parameter', `The ${name} ${where === 'path' ? 'path segment' : 'query parameter'} is not valid: ${issue.message}`);
}

/** Mounts a declared route's handler. `ownQuery`: the handler reads the query itself (resend's own codes). */
export function mount<I extends OperationId>(router: Router, id: I, handler: Handler<I>, base = '', ownQuery = false) {
  const declared = routeOf(id);
  // What it throws goes to the error handler: express 5 passes a rejection to next().
  router[declared.method](expressPath(declared.path, base), async (req: Request, res: Response) => {
    const params = parse(declared.input?.params, req.params, 'path');
    const query = ownQuery ? {} : parse(declared.input?.query, req.query, 'query');
    const undecodable = ownQuery || !declared.input?.query ? undefined : undecodableQuery(req.originalUrl);
    if (undecodable !== undefined) throw badRequest('invalid_parameter', `The ${undecodable} query parameter is not valid: malformed percent-encoding`);
    if (declared.input?.body) checkBodyType(req);
    await handler(req, res, { params, query } as Input<I>);
  });
}

/** Any other method on a declared path answers 405 naming the ones that exist. */
export function methodsNotAllowed(router: Router, base = '', only?: (route: RouteDeclaration) => boolean): void {
  const byPath = new Map<string, string[]>();
  for (const declared of ROUTES as readonly RouteDeclaration[]) {
    if (!declared.path.startsWith(base) || (only && !only(declared))) continue;
    byPath.set(declared.path, [...(byPath.get(declared.path) ?? []), declared.method.toUpperCase()]);
  }
  for (const [path, methods] of byPath) {
    const allow = methods.join(', ');
    router.all(expressPath(path, base), (_req, _res, next) => {
      next(new ApiError(405, 'method_not_allowed', `Use ${allow} for this endpoint`, { allow }));
    });
  }
}

/** A settings body as the schema reads it; its first problem is InvalidSettingsError (400 invalid_settings, naming the field). */
export function bodyOf<T extends z.ZodType>(schema: T, req: Request): z.output<T> {
  // No body is the empty one; JSON null is a body, and no object: refused, never a PATCH that changes nothing.
  const parsed = schema.safeParse(req.body === undefined ? {} : req.body);
  if (!parsed.success) throw firstIssue(parsed.error);
  return parsed.data;
}
