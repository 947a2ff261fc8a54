import { z } from 'zod';
import { EVENT_NAMES } from '../../../libs/contracts/index.js';
import { endpointIdSchema, endpointInputSchema, endpointPatchSchema, rotateInputSchema } from '../../../libs/merchants/index.js';
import type { RouteDeclaration } from '../route-declaration.js';
import { PORTAL_AUTH, PORTAL_WRITE_AUTH, READ_ERRORS as LOG_READ_ERRORS, WRITE_ERRORS } from './route-common.js';
import { envelope, rotated } from '../schemas.js';

/**
 * The portal's routes of a merchant's endpoints (issue 56): list and add, and one endpoint's
 * settings, secret, test event and removal. Spread into PORTAL_ROUTES (routes.ts), so they are in
 * the route table and the OpenAPI document; the handlers are endpoint-handlers.ts.
 */

/** One endpoint as the portal shows it: never a secret. */
export const portalEndpointView = z.strictObject({
  id: z.string().describe('The endpoint id, ep_…'),
  description: z.string().nullable().describe('What the merchant calls it; null when not given'),
  url: z.string(),
  enabled: z.boolean(),
  disabledReason: z.string().nullable().describe('failing (turned off automatically) or manual; null while enabled'),
  disabledAt: z.string().nullable(),
  disabledBy: z
    .enum(['operator', 'merchant'])
    .nullable()
    .describe('Who turned a manual disable on: an endpoint the platform\'s operator turned off cannot be turned on from the portal; null otherwise'),
  failingSince: z.string().nullable().describe('Its first failure after its last success, once it has failed for a tenth of ENDPOINT_DISABLE_AFTER; null: not failing'),
  events: z.array(z.enum(EVENT_NAMES)),
  allEvents: z.boolean().describe('true when the endpoint receives every event (no events filter)'),
  orderByReference: z.boolean().describe('Order per reference: a webhook waits while an earlier one of its tnxRef / payout reference is not yet delivered, failed or skipped'),
  secretCreatedAt: z.string().nullable().describe('When the current secret was issued; null when not recorded'),
  previousSecrets: z.array(z.strictObject({ expiresAt: z.string() })),
  maxPerSecond: z.number().int().nullable().describe('The throttle: at most this many webhooks a second; null: no limit'),
  currentPerSecond: z.number().nullable().describe('Read-only: the rate sent at now, lower than maxPerSecond while the endpoint answers 429 or 503; null: no limit'),
});

export const portalEndpointList = z.strictObject({
  endpoints: z.array(portalEndpointView),
  maxEndpoints: z.number().int().describe('The most endpoints the merchant may have (MAX_ENDPOINTS_PER_MERCHANT)'),
});

export const portalEndpointParams = z.strictObject({ endpointId: endpointIdSchema });
export const testEventBody = z.strictObject({ event: z.enum(EVENT_NAMES) });

const BASE = '/portal/api/endpoints';
/** Reading endpoints needs the session (kept with the log), and counts against no log limit. */
const READ_ERRORS = { '400': 'invalid_parameter', '401': LOG_READ_ERRORS['401'], '503': LOG_READ_ERRORS['503'] };
const SETTINGS_LIMITED = 'rate_limited: at most 10 endpoint changes and rotations a minute per merchant, on all replicas together; see Retry-After';
const READ_ONLY = 'directory_read_only: merchants come from MERCHANTS_FILE here';

export const PORTAL_ENDPOINT_ROUTES = [
  {
    operationId: 'portalListEndpoints',
    method: 'get',
    path: BASE,
    summary: "The session's merchant's endpoints: URL, events, state, rate and failing clock of each",
    security: PORTAL_AUTH,
    output: { '200': { description: 'The endpoints', schema: envelope(portalEndpointList) } },
    errors: READ_ERRORS,
  },
  {
    operationId: 'portalCreateEndpoint',
    method: 'post',
    path: BASE,
    summary: 'Add an endpoint (permission manage-endpoint); its secret is in this answer only',
    description: 'Validated as the admin API does: https outside development mode, no credentials, no private address literal, a URL the merchant does not send to yet.',
    security: PORTAL_WRITE_AUTH,
    input: { body: endpointInputSchema, bodyRequired: true },
    output: { '201': { description: 'Added; secret is shown this once', schema: envelope(portalEndpointView.extend({ secret: z.string().regex(/^whsec_/) })) } },
    errors: {
      ...WRITE_ERRORS,
      '409': `endpoint_limit: the merchant has MAX_ENDPOINTS_PER_MERCHANT endpoints already; endpoint_url_taken; ${READ_ONLY}`,
      '429': SETTINGS_LIMITED,
    },
  },
  {
    operationId: 'portalGetEndpoint',
    method: 'get',
    path: `${BASE}/{endpointId}`,
    summary: 'One endpoint (never its secret)',
    security: PORTAL_AUTH,
    input: { params: portalEndpointParams },
    output: { '200': { description: 'The endpoint', schema: envelope(portalEndpointView) } },
    errors: { ...READ_ERRORS, '404': 'endpoint_not_found' },
  },
  {
    operationId: 'portalUpdateEndpoint',
    method: 'patch',
    path: `${BASE}/{endpointId}`,
    summary: 'Change the URL, description, events, throttle, order per reference or enable/disable one endpoint (permission manage-endpoint)',
    description: 'A JSON merge patch: "events": null goes back to every event, "maxPerSecond": null removes the throttle. Validated as the admin API does.',
    security: PORTAL_WRITE_AUTH,
    input: { params: portalEndpointParams, body: endpointPatchSchema, bodyRequired: true },
    output: { '200': { description: 'Changed', schema: envelope(portalEndpointView) } },
    errors: {
      ...WRITE_ERRORS,
      '404': 'endpoint_not_found',
      '409': `endpoint_url_taken; endpoint_disabled_by_operator: the platform turned it off, only the platform turns it on or changes its URL; ${READ_ONLY}`,
      '429': SETTINGS_LIMITED,
    },
  },
  {
    operationId: 'portalDeleteEndpoint',
    method: 'delete',
    path: `${BASE}/{endpointId}`,
    summary: 'Remove one endpoint: nothing more is sent to it (permission manage-endpoint)',
    security: PORTAL_WRITE_AUTH,
    input: { params: portalEndpointParams },
    output: { '200': { description: 'Removed', schema: envelope(z.strictObject({ deleted: z.string() })) } },
    errors: { ...WRITE_ERRORS, '404': 'endpoint_not_found', '409': `endpoint_disabled_by_operator: the platform turned it off, only the platform deletes it; ${READ_ONLY}`, '429': SETTINGS_LIMITED },
  },
  {
    operationId: 'portalRotateSecret',
    method: 'post',
    path: `${BASE}/{endpointId}/secret/rotate`,
    summary: "Rotate one endpoint's secret with a grace period (permission manage-secret); the new one is shown this once, the other endpoints keep theirs",
    security: PORTAL_WRITE_AUTH,
    // The admin API's body, so that a refusal names the field in the same words ("unknown field grace; allowed: graceSeconds").
    input: { params: portalEndpointParams, body: rotateInputSchema, bodyRequired: false },
    output: { '200': { description: 'Rotated', schema: envelope(rotated) } },
    errors: { ...WRITE_ERRORS, '404': 'endpoint_not_found', '409': `too_many_secrets; ${READ_ONLY}`, '429': SETTINGS_LIMITED },
  },
  {
    operationId: 'portalSendTestEvent',
    method: 'post',
    path: `${BASE}/{endpointId}/test`,
    summary: 'Send this endpoint a sample of an event with a TEST- reference, delivered and logged like any other (permission manage-endpoint)',
    security: PORTAL_WRITE_AUTH,
    input: { params: portalEndpointParams, body: testEventBody, bodyRequired: true },
    output: { '202': { description: 'Published', schema: envelope(z.strictObject({ webhookId: z.string(), reference: z.string() })) } },
    errors: { ...WRITE_ERRORS, '404': 'endpoint_not_found', '429': 'rate_limited: at most 10 test events a minute per merchant, on all replicas together; see Retry-After' },
  },
] as const satisfies readonly RouteDeclaration[];
