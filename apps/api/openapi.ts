import { z } from 'zod';
import { EVENT_NAMES, EVENT_SUMMARIES, webhookExample, webhookPayloadSchema } from '../../libs/contracts/index.js';
import { attemptEvent, disabledEvent, enabledEvent, OPERATIONAL_EVENT_TYPES, secretRotatedEvent, updatedEvent, type OperationalEvent, type OperationalEventType, operationalEventSchema } from '../../libs/operational/index.js';
import { ADMIN_AUTH, MERCHANT_AUTH, type RouteDeclaration } from './route-declaration.js';
import { ROUTES } from './routes.js';
import { errorEnvelope } from './schemas.js';

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

/** What any request can be answered before its route is reached (app.ts, program.ts). */
const BEFORE_ROUTING: Record<string, { code: string; description: string }> = {
  '400': { code: 'invalid_body', description: 'invalid_body: a body sent as JSON that does not parse, on any route' },
  '413': { code: 'body_too_large', description: 'body_too_large: a request body over 16 KiB, on any route' },
  '431': { code: 'header_too_large', description: 'header_too_large: request headers over the server\'s limit, on any route' },
  '503': { code: 'service_unavailable', description: 'service_unavailable: the API is starting (waiting for PostgreSQL, its schema or RabbitMQ), on any route; see Retry-After' },
};
const ANSWERED_WHILE_STARTING = new Set(['health', 'ready']);

const header = (description: string, schema: Json = { type: 'string' }) => ({ description, schema });
/** Response headers a client acts on: the ETag for If-Match, a replay's mark, when to try again, how to authenticate. */
const ETAG = header('The merchant\'s version, quoted (e.g. "7"): send it back as If-Match to change nothing someone changed since');
const REPLAYED = header('true on the first answer given again for a repeated Idempotency-Key', { type: 'string', enum: ['true'] });
const RETRY_AFTER = header('Seconds to wait before trying again, where the answer knows (a limit, a resend under way, the API starting)', { type: 'string', pattern: '^[0-9]+$' });
const WWW_AUTHENTICATE = header('Bearer: the credentials the route wants');

function operation(route: RouteDeclaration): Json {
  const admin = route.path.startsWith('/admin/');
  const merchant = route.path.startsWith('/nucleus/');
  const security = route.security ?? (admin ? ADMIN_AUTH : merchant ? MERCHANT_AUTH : undefined);
  const responses: Json = {};
  const replayable = route.input?.headers?.some((h) => (h as { name?: string }).name === 'Idempotency-Key') === true;
  const successHeaders = { ...(route.versioned ? { ETag: ETAG } : {}), ...(replayable ? { 'Idempotent-Replayed': REPLAYED } : {}) };
  // A 401 of the routes' own authentication names its scheme; the portal's session answers do not.
  const errorHeaders: Record<string, Json> = { '429': { 'Retry-After': RETRY_AFTER }, '503': { 'Retry-After': RETRY_AFTER }, ...(security ? { '401': { 'WWW-Authenticate': WWW_AUTHENTICATE } } : {}) };
  for (const [status, out] of Object.entries(route.output)) {
    const headers = status.startsWith('2') && Object.keys(successHeaders).length > 0 ? { headers: successHeaders } : {};
    responses[status] = out.mediaType
      ? { description: out.description, ...headers, content: { [out.mediaType]: { schema: { type: 'string' } } } }
      : { description: out.description, ...headers, content: { 'application/json': { schema: jsonSchema(out.schema!, 'output') } } };
  }
  const errors: Record<string, string> = { ...route.errors };
  for (const [status, before] of Object.entries(BEFORE_ROUTING)) {
    if (status === '503' && ANSWERED_WHILE_STARTING.has(route.operationId)) continue;
    const own = errors[status];
    errors[status] = own === undefined ? before.description : own.includes(before.code) ? own : `${own}; ${before.description}`;
  }
  for (const [status, description] of Object.entries(errors)) {
    responses[status] = { description, ...(errorHeaders[status] ? { headers: errorHeaders[status] } : {}), content: { 'application/json': { schema: { $ref: '#/components/schemas/ErrorEnvelope' } } } };
  }
  const input = route.input;
  const params = [...parameters('path', input?.params), ...parameters('query', input?.query), ...(input?.headers ?? [])];
  const body = input?.body && jsonSchema(input.body, 'input');
  return {
    operationId: route.operationId,
    summary: route.summary,
    ...(route.description ? { description: route.description } : {}),
    ...(security ? { security } : {}),
    ...(params.length > 0 ? { parameters: params } : {}),
    ...(body && {
      requestBody: {
        required: input?.bodyRequired ?? false,
        content: Object.fromEntries((input?.bodyMediaTypes ?? ['application/json']).map((type) => [type, { schema: body }])),
      },
    }),
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

const signed = (name: string, schema: Json, example: string, description: string) => ({ name, in: 'header', required: true, description, schema, example });
/** The three Standard Webhooks headers, worded for who receives them: the id and the secret differ. */
const signatureHeaders = (id: { example: string; description: string }, signature: string) => [
  signed('webhook-id', { type: 'string', maxLength: 200 }, id.example, id.description),
  signed('webhook-timestamp', { type: 'string', pattern: '^[0-9]+$' }, '1777629600',
    'Seconds since the epoch when this attempt was signed; refuse one far from your clock (Standard Webhooks: 5 minutes) against replays.'),
  signed('webhook-signature', { type: 'string' }, 'v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4=', signature),
];
const TO_MERCHANTS_HEADERS = signatureHeaders(
  { example: 'evt_5e0c7c2a', description: "The webhook's id (the upstream messageId): the same on every attempt and resend, so a merchant can drop a duplicate by it." },
  "Space-separated `v1,<base64 HMAC-SHA256 of '<webhook-id>.<webhook-timestamp>.<body>'>` with the merchant's whsec_ secret (base64 after the prefix). " +
    "During a secret rotation's grace period there is one signature per secret: accept the request when any of them verifies. The standardwebhooks libraries do this.",
);
// The operational webhook's id is the event's own (libs/operational/events.ts), not an upstream one, and its one secret is the platform's.
const TO_PLATFORM_HEADERS = signatureHeaders(
  { example: 'op_3f2a9c1b5e0c7c2a8d4b6e1f0a9c7d2e', description: "The operational event's id (`op_` and 32 hex characters, also its AMQP messageId): the same on every attempt, so the platform can drop a duplicate by it." },
  "`v1,<base64 HMAC-SHA256 of '<webhook-id>.<webhook-timestamp>.<body>'>` with OPERATIONAL_WEBHOOK_SECRET (a whsec_ secret; base64 after the prefix).",
);

/** An operational event of each type as the dispatcher builds it (fixed values: the document does not change between builds). */
function operationalExample(type: OperationalEventType): OperationalEvent {
  const at = new Date('2026-05-01T10:00:00.000Z');
  const endpoint = { merchantId: 'm_example', endpointId: 'ep_8Jq2vXk4Tn1Rz7Ws', url: 'https://merchant.example/hooks' };
  const facts = {
    ...endpoint,
    webhookId: 'evt_5e0c7c2a',
    event: 'payout',
    references: ['PO-1777629600000-3f2a9c1b'],
    attempts: 4,
    lastHttpStatus: 503,
    lastError: 'HTTP 503',
  };
  switch (type) {
    case 'endpoint.disabled':
      return disabledEvent({ ...facts, reason: 'failing', disabledAt: at.toISOString(), failingSince: '2026-04-26T09:12:00.000Z' }, at).event;
    case 'endpoint.enabled':
      return enabledEvent({ ...endpoint, enabledAt: at.toISOString() }, at).event;
    case 'endpoint.updated':
      return updatedEvent({ ...endpoint, previousUrl: 'https://merchant.example/old-hooks', changed: ['url'], events: null, updatedAt: at.toISOString() }, at).event;
    case 'endpoint.secret_rotated':
      return secretRotatedEvent({ ...endpoint, rotatedAt: at.toISOString() }, at).event;
    case 'message.attempt.exhausted':
      return attemptEvent(type, { ...facts, attempts: 8, reason: 'attempts-exhausted' }, at).event;
    default:
      return attemptEvent(type, facts, at).event;
  }
}

/** A webhook the service POSTs (OpenAPI 3.1 `webhooks`), signed, its body's schema and an example. */
function webhook(operationId: string, summary: string, description: string, tag: string, headers: Json[], body: z.ZodType, example: unknown, responses: Json): Json {
  const content = { 'application/json': { schema: jsonSchema(body, 'output'), example } };
  return { post: { operationId, summary, description, tags: [tag], parameters: headers, requestBody: { required: true, content }, responses } };
}

/** What the service POSTs to a merchant for each event (the event catalog), and to the platform's OPERATIONAL_WEBHOOK_URL. */
function webhooks(): Json {
  const toMerchants = EVENT_NAMES.map((event): [string, Json] => {
    const description =
      `POSTed to the merchant's webhook URL for each ${event} event, body exactly {"event", "data"}, content-type application/json. ` +
      'Answer 2xx within the delivery timeout once you have stored it; anything else, a timeout or a network error is a failed attempt, ' +
      "retried on the schedule, then kept in the failed queue for a resend. Verify webhook-signature over the body's exact bytes before parsing it.";
    return [
      event,
      webhook(`webhook.${event}`, EVENT_SUMMARIES[event], description, 'Webhooks to merchants', TO_MERCHANTS_HEADERS, webhookPayloadSchema(event), webhookExample(event), {
        '2XX': { description: 'Delivered: no further attempt' },
        default: { description: 'A failed attempt (so are a timeout and a network error): retried on the schedule' },
      }),
    ];
  });
  const toPlatform = OPERATIONAL_EVENT_TYPES.map((type): [string, Json] => {
    const summary = `Operational event, to the platform: ${operationalEventSchema(type).description ?? type}`;
    const description =
      'POSTed to OPERATIONAL_WEBHOOK_URL (signed with OPERATIONAL_WEBHOOK_SECRET) and published to `<prefix>.operational` with routing key ' +
      `${type}. Noise is bounded: per endpoint at most one message.attempt.* event of a kind per OPERATIONAL_EVENT_INTERVAL, the rest counted in data.suppressed.`;
    return [
      type,
      webhook(`operational.${type}`, summary, description, 'Operational events (platform)', TO_PLATFORM_HEADERS, operationalEventSchema(type), operationalExample(type), {
        '2XX': { description: 'Received' },
        default: { description: 'A failed attempt: retried on RETRY_SCHEDULE' },
      }),
    ];
  });
  return Object.fromEntries([...toMerchants, ...toPlatform]);
}

const bearer = (description: string) => ({ type: 'http', scheme: 'bearer', bearerFormat: 'JWT', description });
const apiKey = (where: 'header' | 'cookie', name: string, description: string) => ({ type: 'apiKey', in: where, name, description });

export const openApiDocument = {
  openapi: '3.1.0',
  info: {
    title: 'Nucleus Webhooks: resend API, delivery log and admin API',
    version: '1.1.0',
    description:
      'Resends failed webhook notifications (charge.completed, payout, refund.completed) to the merchant server, and ' +
      'shows what happened to each webhook (the delivery log) and every event (the feed, to reconcile). ' +
      "The admin API (/admin/...) lets the dashboard's backend set up merchants' webhooks and operators read any merchant's log. " +
      'Every answer uses the envelope {message, error, data}.',
  },
  servers: [{ url: 'http://127.0.0.1:8080' }],
  paths: paths(),
  webhooks: webhooks(),
  components: {
    securitySchemes: {
      adminToken: bearer('Access token from the platform auth service whose scope includes webhooks:admin'),
      merchantPublicKey: apiKey('header', 'x-auth-token', 'Merchant public key (dashboard: Settings, Generate API keys, Merchant public key)'),
      accessToken: bearer('Access token from the platform auth service; sub is the merchant id'),
      portalSession: apiKey('cookie', 'webhooks_portal', 'The merchant portal\'s session, set by POST /portal/api/session from a single-use link'),
      portalCsrf: apiKey('header', 'x-csrf-token', 'The session\'s CSRF token (GET /portal/api/session), on every portal write'),
    },
    schemas: { ErrorEnvelope: jsonSchema(errorEnvelope, 'output') },
  },
};
