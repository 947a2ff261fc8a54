import { z } from 'zod';
import { ROUTES, type RouteDeclaration } from './routes.js';
import { errorEnvelope } from './schemas.js';

/**
 * OpenAPI 3.1 description of the API, made from the route table (routes.ts): nothing here is
 * written by hand but the document's head and the security schemes.
 * test/support/api.ts checks every answer the tests see against it.
 */
type Json = Record<string, unknown>;

function jsonSchema(schema: z.ZodType, io: 'input' | 'output'): Json {
  const { $schema: _ignored, ...rest } = z.toJSONSchema(schema, { io, target: 'draft-2020-12', unrepresentable: 'any' }) as Json;
  return rest;
}

/** Path and query parameters, one per key of the zod object, its description lifted to the parameter. */
function parameters(where: 'path' | 'query', shape: z.ZodObject | undefined): Json[] {
  if (!shape) return [];
  const required = new Set((jsonSchema(shape, 'input').required as string[] | undefined) ?? []);
  return Object.entries(shape.shape).map(([name, field]) => {
    const { description, ...schema } = jsonSchema(field as z.ZodType, 'input');
    return { name, in: where, required: where === 'path' || required.has(name), ...(description ? { description } : {}), schema };
  });
}

const errorResponse = (description: string) => ({
  description,
  content: { 'application/json': { schema: { $ref: '#/components/schemas/ErrorEnvelope' } } },
});

function operation(route: RouteDeclaration): Json {
  const responses: Json = {};
  for (const [status, out] of Object.entries(route.output)) {
    responses[status] = out.mediaType
      ? { description: out.description, content: { [out.mediaType]: { schema: { type: 'string' } } } }
      : { description: out.description, content: { 'application/json': { schema: jsonSchema(out.schema!, 'output') } } };
  }
  for (const [status, description] of Object.entries(route.errors)) responses[status] = errorResponse(description);
  const input = route.input;
  const params = [...parameters('path', input?.params), ...parameters('query', input?.query), ...(input?.headers ?? [])];
  const body = input?.body && jsonSchema(input.body, 'input');
  return {
    operationId: route.operationId,
    summary: route.summary,
    ...(route.description ? { description: route.description } : {}),
    ...(route.security ? { security: route.security } : {}),
    ...(params.length > 0 ? { parameters: params } : {}),
    ...(body
      ? {
          requestBody: {
            required: input?.bodyRequired ?? false,
            content: Object.fromEntries((input?.bodyMediaTypes ?? ['application/json']).map((type) => [type, { schema: body }])),
          },
        }
      : {}),
    responses,
  };
}

function paths(): Json {
  const out: Record<string, Json> = {};
  for (const route of ROUTES as readonly RouteDeclaration[]) {
    out[route.path] ??= {};
    out[route.path]![route.method] = operation(route);
  }
  return out;
}

export const openApiDocument = {
  openapi: '3.1.0',
  info: {
    title: 'Payment webhooks: resend API, delivery log and admin API',
    version: '1.1.0',
    description:
      'Resends failed webhook notifications (charge.completed, payout, refund.completed) to the merchant server, and ' +
      'shows what happened to each webhook (the delivery log) and every event (the feed, to reconcile). ' +
      "The admin API (/admin/...) lets the dashboard's backend set up merchants' webhooks and operators read any merchant's log. " +
      'Every answer uses the envelope {message, error, data}.',
  },
  servers: [{ url: 'http://127.0.0.1:8080' }],
  paths: paths(),
  components: {
    securitySchemes: {
      adminToken: {
        type: 'http',
        scheme: 'bearer',
        bearerFormat: 'JWT',
        description: 'Access token from the platform auth service whose scope includes webhooks:admin',
      },
      merchantPublicKey: {
        type: 'apiKey',
        in: 'header',
        name: 'x-auth-token',
        description: 'Merchant public key (dashboard: Settings, Generate API keys, Merchant public key)',
      },
      accessToken: {
        type: 'http',
        scheme: 'bearer',
        bearerFormat: 'JWT',
        description: 'Access token from the platform auth service; sub is the merchant id',
      },
      portalSession: {
        type: 'apiKey',
        in: 'cookie',
        name: 'webhooks_portal',
        description: 'The merchant portal\'s session, set by POST /portal/api/session from a single-use link',
      },
      portalCsrf: {
        type: 'apiKey',
        in: 'header',
        name: 'x-csrf-token',
        description: 'The session\'s CSRF token (GET /portal/api/session), on every portal write',
      },
    },
    schemas: { ErrorEnvelope: jsonSchema(errorEnvelope, 'output') },
  },
};
