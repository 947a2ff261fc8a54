import { z } from 'zod';
import { endpointIdSchema, endpointInputSchema, endpointPatchSchema, MAX_ENDPOINTS_PER_MERCHANT, rotateInputSchema } from '../../libs/merchants/index.js';
import { ADMIN_AUTH, ADMIN_ERRORS, GUARDED_WRITE_HEADERS, IDEMPOTENCY_ERRORS, merchantIdParams, type RouteDeclaration } from './route-declaration.js';
import { endpointView, envelope, rotated } from './schemas.js';

const endpointParams = merchantIdParams.extend({ endpointId: endpointIdSchema });
const BASE = '/admin/merchants/{merchantId}/endpoints';
const NOT_FOUND = 'merchant_not_found; endpoint_not_found';
const URL_TAKEN = 'endpoint_url_taken: another endpoint of this merchant has this URL';
/** An endpointId that is not an endpoint id is refused before the merchant is looked at. */
const BAD_ENDPOINT_ID = `${ADMIN_ERRORS['400']}; invalid_parameter: the endpointId path segment is not an endpoint id (ep_…)`;
/** What a route on one endpoint (its id in the path) may answer besides its own. */
const ONE_ENDPOINT_ERRORS = { ...ADMIN_ERRORS, '400': BAD_ENDPOINT_ID, '404': NOT_FOUND } as const;

/** A merchant's endpoints, one at a time: each write is a write of the merchant (its ETag, If-Match, Idempotency-Key, audit). */
export const ENDPOINT_ROUTES = [
  {
    operationId: 'listEndpoints', method: 'get', path: BASE,
    summary: "A merchant's endpoints (never a secret)",
    security: ADMIN_AUTH,
    input: { params: merchantIdParams },
    output: { '200': { description: 'The endpoints', schema: envelope(z.strictObject({ endpoints: z.array(endpointView) })) } },
    errors: { ...ADMIN_ERRORS, '404': 'merchant_not_found' },
  },
  {
    operationId: 'createEndpoint', method: 'post', path: BASE,
    summary: 'Add an endpoint to a merchant',
    description:
      'The endpoint gets an id (ep_…) and a new whsec_ secret, returned in this answer only (and to a repeat of its ' +
      'Idempotency-Key). The URL must be https (http only in development mode), carry no credentials and no fragment, not be a ' +
      'loopback, private or link-local address literal, and not be one the merchant already sends to. Leaving out ' +
      `events means all three. A merchant has at most MAX_ENDPOINTS_PER_MERCHANT endpoints (${MAX_ENDPOINTS_PER_MERCHANT} by default, ` +
      'and at most that).',
    security: ADMIN_AUTH,
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
    operationId: 'getEndpoint', method: 'get', path: `${BASE}/{endpointId}`,
    summary: 'One endpoint (never its secret)',
    security: ADMIN_AUTH,
    input: { params: endpointParams },
    output: { '200': { description: 'The endpoint', schema: envelope(endpointView) } },
    errors: ONE_ENDPOINT_ERRORS,
  },
  {
    operationId: 'patchEndpoint', method: 'patch', path: `${BASE}/{endpointId}`,
    summary: 'Change only what the body names of one endpoint',
    description:
      'A JSON merge patch (RFC 7396): {"enabled":false} disables this endpoint alone and keeps its URL, events and ' +
      'secret; "events": null goes back to every event; "maxPerSecond": null removes the throttle.',
    security: ADMIN_AUTH,
    input: { params: endpointParams, headers: GUARDED_WRITE_HEADERS, body: endpointPatchSchema, bodyRequired: true, bodyMediaTypes: ['application/json', 'application/merge-patch+json'] },
    output: { '200': { description: 'Changed', schema: envelope(endpointView) } },
    errors: { ...ONE_ENDPOINT_ERRORS, '409': URL_TAKEN, ...IDEMPOTENCY_ERRORS },
  },
  {
    operationId: 'deleteEndpoint', method: 'delete', path: `${BASE}/{endpointId}`,
    summary: 'Remove one endpoint: nothing more is sent to it',
    security: ADMIN_AUTH,
    input: { params: endpointParams, headers: GUARDED_WRITE_HEADERS },
    output: { '200': { description: 'Removed', schema: envelope(z.strictObject({ deleted: z.string() })) } },
    errors: { ...ONE_ENDPOINT_ERRORS, ...IDEMPOTENCY_ERRORS },
  },
  {
    operationId: 'rotateEndpointSecret', method: 'post', path: `${BASE}/{endpointId}/secret/rotate`,
    summary: "Rotate one endpoint's secret; the merchant's other endpoints keep theirs",
    description:
      'Returns the new secret (this once, and again to a repeat of its Idempotency-Key). The secret it replaces keeps ' +
      'signing until previousSecretExpiresAt; at most 3 old secrets sign at once; graceSeconds 0 replaces it at once.',
    security: ADMIN_AUTH,
    input: { params: endpointParams, headers: GUARDED_WRITE_HEADERS, body: rotateInputSchema, bodyRequired: false },
    output: { '200': { description: 'Rotated', schema: envelope(rotated) } },
    errors: { ...ONE_ENDPOINT_ERRORS, '409': 'too_many_secrets: 3 old secrets are still in their grace', ...IDEMPOTENCY_ERRORS },
  },
] as const satisfies readonly RouteDeclaration[];
