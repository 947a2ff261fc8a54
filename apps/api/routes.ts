import { z } from 'zod';
import {
  endpointIdSchema,
  endpointInputSchema,
  endpointPatchSchema,
  MAX_ENDPOINTS_PER_MERCHANT,
  merchantInputSchema,
  merchantPatchSchema,
  rotateInputSchema,
} from '../../libs/merchants/index.js';
import { endpointView, envelope, merchantView, readiness, rotated } from './schemas.js';
import { LOG_ROUTES } from './log-routes.js';
import { PORTAL_ROUTES } from './portal/routes.js';
import { ADMIN_ERRORS, GUARDED_WRITE_HEADERS, IDEMPOTENCY_ERRORS, merchantIdParams, PUBLIC_KEY_TAKEN, type RouteDeclaration } from './route-declaration.js';

/** Entries per page of a merchant's audit trail: by default, and at most. */
export const AUDIT_PAGE_LIMIT = { default: 100, max: 500 };

const auditQuery = z.strictObject({
  limit: z.coerce.number().int().min(1).max(AUDIT_PAGE_LIMIT.max).optional().describe(`Entries per page, ${AUDIT_PAGE_LIMIT.default} by default`),
  before: z.string().regex(/^\d{1,18}$/, 'must be an entry id from nextBefore').optional(),
});
const auditEntry = z.strictObject({
  id: z.string(),
  at: z.string(),
  actor: z.string(),
  action: z.string().describe('merchant.created, merchant.updated; for a change of one endpoint alone endpoint.created, endpoint.updated, endpoint.deleted, secret.rotated; portal.link_minted, portal.sessions_revoked, merchant.deleted (the trail outlives the merchant); from the portal: portal.session_opened, portal.link_reused, portal.test_event, portal.webhook_resent, portal.recover_round; from the merchant API: webhook.resent'),
  changes: z.record(z.string(), z.unknown()).describe('By field: {from, to}, or "rotated" for the secret; an endpoint\'s fields under its id (endpoints.ep_….url), an endpoint added or removed as endpoints.ep_… from or to its {url}'),
  address: z.string().nullable(),
});

const merchantAnswer = (description: string) => ({ description, schema: envelope(merchantView) });

export const referenceSchema = z.string().min(1).max(200).regex(/^[^\u0000-\u001f\u007f-\u009f]+$/).describe(
  'The reference used when initiating the transaction (tx_ref), URL-encoded: 1 to 200 characters, any except ' +
    'control characters and lone UTF-16 surrogates; the same set the service accepts from upstream, so every failed webhook can be resent.',
);

const endpointParams = merchantIdParams.extend({ endpointId: endpointIdSchema });
const BASE = '/admin/merchants/{merchantId}/endpoints';
const NOT_FOUND = 'merchant_not_found; endpoint_not_found';
const URL_TAKEN = 'endpoint_url_taken: another endpoint of this merchant has this URL';
/** An endpointId that is not an endpoint id is refused before the merchant is looked at. */
const BAD_ENDPOINT_ID = `${ADMIN_ERRORS['400']}; invalid_parameter: the endpointId path segment is not an endpoint id (ep_…)`;
/** What a route on one endpoint (its id in the path) may answer besides its own. */
const ONE_ENDPOINT_ERRORS = { ...ADMIN_ERRORS, '400': BAD_ENDPOINT_ID, '404': NOT_FOUND } as const;

/** A merchant's endpoints, one at a time: each write is a write of the merchant (its ETag, If-Match, Idempotency-Key, audit). */
const ENDPOINT_ROUTES = [
  {
    operationId: 'listEndpoints', versioned: true, method: 'get', path: BASE,
    summary: "A merchant's endpoints (never a secret)",
    input: { params: merchantIdParams },
    output: { '200': { description: 'The endpoints', schema: envelope(z.strictObject({ endpoints: z.array(endpointView) })) } },
    errors: { ...ADMIN_ERRORS, '404': 'merchant_not_found' },
  },
  {
    operationId: 'createEndpoint', versioned: true, method: 'post', path: BASE,
    summary: 'Add an endpoint to a merchant',
    description:
      'The endpoint gets an id (ep_…) and a new whsec_ secret, returned in this answer only (and to a repeat of its ' +
      'Idempotency-Key). The URL must be https (http only in development mode), carry no credentials and no fragment, not be a ' +
      'loopback, private or link-local address literal, and not be one the merchant already sends to. Leaving out ' +
      `events means all three. A merchant has at most MAX_ENDPOINTS_PER_MERCHANT endpoints (${MAX_ENDPOINTS_PER_MERCHANT} by default, ` +
      'and at most that).',
    input: { params: merchantIdParams, headers: GUARDED_WRITE_HEADERS, body: endpointInputSchema, bodyRequired: true },
    output: { '201': { description: 'Created; secret is shown this once', schema: envelope(endpointView) } },
    errors: {
      ...ADMIN_ERRORS,
      '404': 'merchant_not_found: PUT creates merchants',
      '409': `endpoint_limit: the merchant has the most endpoints it may have (the message names the limit); ${URL_TAKEN}`,
      ...IDEMPOTENCY_ERRORS,
    },
  },
  {
    operationId: 'getEndpoint', versioned: true, method: 'get', path: `${BASE}/{endpointId}`,
    summary: 'One endpoint (never its secret)',
    input: { params: endpointParams },
    output: { '200': { description: 'The endpoint', schema: envelope(endpointView) } },
    errors: ONE_ENDPOINT_ERRORS,
  },
  {
    operationId: 'patchEndpoint', versioned: true, method: 'patch', path: `${BASE}/{endpointId}`,
    summary: 'Change only what the body names of one endpoint',
    description:
      'A JSON merge patch (RFC 7396): {"enabled":false} disables this endpoint alone and keeps its URL, events and ' +
      'secret; "events": null goes back to every event; "maxPerSecond": null removes the throttle.',
    input: { params: endpointParams, headers: GUARDED_WRITE_HEADERS, body: endpointPatchSchema, bodyRequired: true, bodyMediaTypes: ['application/json', 'application/merge-patch+json'] },
    output: { '200': { description: 'Changed', schema: envelope(endpointView) } },
    errors: { ...ONE_ENDPOINT_ERRORS, '409': URL_TAKEN, ...IDEMPOTENCY_ERRORS },
  },
  {
    operationId: 'deleteEndpoint', versioned: true, method: 'delete', path: `${BASE}/{endpointId}`,
    summary: 'Remove one endpoint: nothing more is sent to it',
    input: { params: endpointParams, headers: GUARDED_WRITE_HEADERS },
    output: { '200': { description: 'Removed', schema: envelope(z.strictObject({ deleted: z.string() })) } },
    errors: { ...ONE_ENDPOINT_ERRORS, ...IDEMPOTENCY_ERRORS },
  },
  {
    operationId: 'rotateEndpointSecret', versioned: true, method: 'post', path: `${BASE}/{endpointId}/secret/rotate`,
    summary: "Rotate one endpoint's secret; the merchant's other endpoints keep theirs",
    description:
      'Returns the new secret (this once, and again to a repeat of its Idempotency-Key). The secret it replaces keeps ' +
      'signing until previousSecretExpiresAt; at most 3 old secrets sign at once; graceSeconds 0 replaces it at once.',
    input: { params: endpointParams, headers: GUARDED_WRITE_HEADERS, body: rotateInputSchema, bodyRequired: false },
    output: { '200': { description: 'Rotated', schema: envelope(rotated) } },
    errors: { ...ONE_ENDPOINT_ERRORS, '409': 'too_many_secrets: 3 old secrets are still in their grace', ...IDEMPOTENCY_ERRORS },
  },
] as const satisfies readonly RouteDeclaration[];

export const ROUTES = [
  {
    operationId: 'resendWebhook', method: 'post', path: '/nucleus/tnx/webhook',
    summary: 'Resend the failed webhook(s) of a transaction reference',
    description:
      "Finds the caller's unresolved failed webhooks for the reference (a refund is found by refundRef or tnxRef) on every " +
      'endpoint where they failed, each failure once and to its own endpoint alone (x-endpoint-id), never to an endpoint ' +
      'where the webhook was delivered; ' +
      'claims them in PostgreSQL (one conditional update, so any number of replicas deliver each once), ' +
      'sends them again with their original webhook-id, and marks them resent. If delivery fails again they return ' +
      'to the failed queue and can be resent again. No request body is needed; a JSON body is ignored.',
    input: { query: z.strictObject({ reference: referenceSchema }) },
    output: {
      // [\s\S], not ".": a reference may hold U+2028 or U+2029, where a regex's "." stops.
      '200': { description: 'The webhook was sent again', schema: envelope(z.null(), z.string().regex(/^webhook sent for reference [\s\S]+$/)) },
    },
    errors: {
      '400':
        'missing_reference; invalid_reference: repeated, longer than 200 characters, or holding a control character or a lone UTF-16 surrogate ' +
        '(percent-encoded bytes that are not UTF-8, as %FF or %ED%A0%80, too); ' +
        'unknown_parameter: a query parameter other than reference (one with an empty name, as &=b, too); invalid_body: a body that is not JSON',
      '401': 'Missing or invalid public key or access token, or an expired token',
      '403': 'The token and the public key name different merchants',
      '404':
        'not_found: no unresolved failed webhook for this merchant and reference: none failed, or it was already resent ' +
        '(a resend whose outcome was unknown and that was delivered ends here too).',
      '409':
        "webhook_disabled: every endpoint of the merchant is disabled or none is set up, or a failure found is of a disabled " +
        'endpoint; the failed entry stays and can be resent once it is enabled. ' +
        "event_not_subscribed: otherwise, a failure's endpoint no longer receives its event; the entry stays and can be resent " +
        'once the event is added back. endpoint_deleted: every failure found is of an endpoint deleted since; there is nowhere to ' +
        'resend it (it stays in the failure index until DELIVERY_LOG_RETENTION). These three are answered only when nothing ' +
        'else was resent. resend_in_progress: another request (on this or another replica) is resending this ' +
        'reference, or an earlier resend answered 503 resend_outcome_unknown and its unconfirmed copy, which may still be delivered, ' +
        'is all that is left to resend; resending now ' +
        "could deliver twice, so wait for Retry-After (the rest of that resend's 30 s claim), then a resend answers 404 if it " +
        'was delivered or 200 if it never left. Of two concurrent resends of one reference, one answers 200 and the other 409 ' +
        '(or 404 if the first had already finished); the webhook is delivered once.',
      '429':
        'rate_limited: over RESEND_RATE_LIMIT, counted on all replicas together. too_many_resends: every failed webhook of the ' +
        'reference was resent 10 times in the last 24 hours (a webhook cannot be turned into a stream of POSTs). See Retry-After',
      '503':
        'service_unavailable: broker unavailable or slow to confirm (flow control) before anything was resent, or PostgreSQL ' +
        '(the failure index) not answering; retry after Retry-After. resend_outcome_unknown: the copy was published but the broker did not ' +
        "confirm it in time; it may still be delivered, so its failure stays claimed: Retry-After is that claim's lease. The copies " +
        'before it went out and are marked resent; the failures not tried yet are given back at once, so a resend before ' +
        'Retry-After answers 200 and sends those (nothing twice), or 409 resend_in_progress when the unconfirmed one is all that ' +
        "is left. auth_unavailable: the auth service's keys could not be fetched.",
    },
  },
  ...LOG_ROUTES,
  ...PORTAL_ROUTES,
  ...ENDPOINT_ROUTES,
  {
    operationId: 'getMerchant', versioned: true, method: 'get', path: '/admin/merchants/{merchantId}',
    summary: "A merchant: its public key and its endpoints (never a secret)",
    input: { params: merchantIdParams },
    output: { '200': merchantAnswer("The merchant's settings") },
    errors: { ...ADMIN_ERRORS, '404': 'merchant_not_found' },
    // Its ETag header is the merchant's version, for If-Match on the next write.
  },
  {
    operationId: 'getMerchantAudit', method: 'get', path: '/admin/merchants/{merchantId}/audit',
    summary: "The merchant's audit trail, newest first",
    description:
      'Every settings write (admin API, portal, CLI, auto-disable, rotation), portal link minted and revocation of ' +
      'portal sessions: when, who (admin:<token sub>, portal:<session>, cli, service), what changed by field (a secret ' +
      'only as "rotated", never its value) and from which address. Pages: pass nextBefore as before.',
    input: { params: merchantIdParams, query: auditQuery },
    output: { '200': { description: 'The entries', schema: envelope(z.strictObject({ entries: z.array(auditEntry), nextBefore: z.string().nullable() })) } },
    errors: {
      ...ADMIN_ERRORS,
      '400': `${ADMIN_ERRORS['400']}; invalid_parameter: limit or before malformed; unknown_parameter: another query parameter`,
    },
  },
  {
    operationId: 'putMerchant', versioned: true, method: 'put', path: '/admin/merchants/{merchantId}',
    summary: "Create a merchant or replace its settings",
    description:
      'Creates the merchant or replaces its public key (unique among merchants). Its endpoints are kept: add, change, ' +
      'delete and rotate them through /admin/merchants/{merchantId}/endpoints; the answer lists them. Any other field ' +
      '(such as webhook) answers 400 naming it.',
    input: { params: merchantIdParams, headers: GUARDED_WRITE_HEADERS, body: merchantInputSchema, bodyRequired: true },
    output: { '200': merchantAnswer('Updated'), '201': merchantAnswer('Created, with no endpoint yet') },
    errors: { ...ADMIN_ERRORS, '409': PUBLIC_KEY_TAKEN, ...IDEMPOTENCY_ERRORS },
  },
  {
    operationId: 'patchMerchant', versioned: true, method: 'patch', path: '/admin/merchants/{merchantId}',
    summary: 'Change only the settings the body names',
    description:
      'A JSON merge patch (RFC 7396) of the merchant\'s own settings: fields left out stay as they are. Endpoints are ' +
      'changed through /admin/merchants/{merchantId}/endpoints/{endpointId}; any other field answers 400 naming it.',
    input: { params: merchantIdParams, headers: GUARDED_WRITE_HEADERS, body: merchantPatchSchema, bodyRequired: true, bodyMediaTypes: ['application/json', 'application/merge-patch+json'] },
    output: { '200': merchantAnswer('Changed') },
    errors: { ...ADMIN_ERRORS, '404': 'merchant_not_found: PUT creates merchants', '409': PUBLIC_KEY_TAKEN, ...IDEMPOTENCY_ERRORS },
  },
  {
    operationId: 'health', method: 'get', path: '/healthz',
    summary: 'Liveness',
    output: { '200': { description: 'The process is up', schema: z.looseObject({ status: z.literal('ok') }) } },
  },
  {
    operationId: 'ready', method: 'get', path: '/readyz',
    summary: 'Readiness: broker connected, PostgreSQL reachable and every merchant readable; how far behind the delivery log is',
    output: { '200': { description: 'Ready', schema: readiness }, '503': { description: 'Not ready', schema: readiness } },
  },
  {
    operationId: 'metrics', method: 'get', path: '/metrics',
    summary: 'Prometheus metrics (text exposition format)',
    output: { '200': { description: 'Metrics', mediaType: 'text/plain' } },
  },
  {
    operationId: 'openapi', method: 'get', path: '/openapi.json',
    summary: 'This document',
    output: { '200': { description: 'OpenAPI 3.1 document', schema: z.looseObject({}) } },
  },
] as const satisfies readonly RouteDeclaration[];

export type OperationId = (typeof ROUTES)[number]['operationId'];

export function route(operationId: OperationId): RouteDeclaration {
  return ROUTES.find((r) => r.operationId === operationId)!;
}
