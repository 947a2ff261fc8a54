import { z } from 'zod';
import { EVENT_NAMES } from '../../../libs/contracts/index.js';
import { endpointIdSchema as endpointIdPath, endpointInputSchema, endpointPatchSchema, rotateInputSchema } from '../../../libs/merchants/index.js';
import { PORTAL_PERMISSIONS } from '../../../libs/portal/index.js';
import { listQuery, webhookDetail, webhookIdParams, webhookPage, webhookSummary } from '../log-routes.js';
import { ADMIN_AUTH, MERCHANT_AUTH, merchantIdParams, type RouteDeclaration } from '../route-declaration.js';
import { endpointShown, envelope, rotated } from '../schemas.js';

const READ_ERRORS = {
  '400': 'invalid_parameter, unknown_parameter',
  '401': 'portal_session_required: no session cookie, or the session has expired; open a new link',
  '429': "rate_limited, too_many_concurrent_queries: the merchant's log reads; see Retry-After",
  '503': 'log_unavailable, log_disabled: the portal reads the delivery log',
};

const WRITE_ERRORS = {
  '400': 'invalid_body, invalid_parameter, invalid_settings (the message names the field)',
  '401': 'portal_session_required',
  '403':
    'csrf_token_invalid: x-csrf-token missing or not this session\'s; permission_denied: the link did not grant this; ' +
    'cross_origin_write: Origin or Sec-Fetch-Site says the request does not come from the portal\'s page',
  '503': 'service_unavailable, log_unavailable',
};

/** One endpoint as the portal shows it: as the admin API does (never a secret), and who turned it off. */
const portalEndpointView = z.strictObject(endpointShown).omit({ previousSecretExpiresAt: true }).extend({
  disabledBy: z.enum(['operator', 'merchant']).nullable().describe(
    'Who turned a manual disable on: an endpoint the platform\'s operator turned off cannot be turned on from the portal; null otherwise',
  ),
  allEvents: z.boolean().describe('true when the endpoint receives every event (no events filter)'),
  secretCreatedAt: z.string().nullable().describe('When the current secret was issued; null when not recorded'),
});

const portalEndpointList = z.strictObject({
  endpoints: z.array(portalEndpointView),
  maxEndpoints: z.number().int().describe('The most endpoints the merchant may have (MAX_ENDPOINTS_PER_MERCHANT)'),
});

const portalEndpointParams = z.strictObject({ endpointId: endpointIdPath });
export const testEventBody = z.strictObject({ event: z.enum(EVENT_NAMES) });

const BASE = '/portal/api/endpoints';
/** Reading endpoints needs the session (kept with the log), and counts against no log limit. */
const ENDPOINT_READ_ERRORS = { '400': 'invalid_parameter', '401': READ_ERRORS['401'], '503': READ_ERRORS['503'] };
const SETTINGS_LIMITED = 'rate_limited: at most 10 endpoint changes and rotations a minute per merchant (refused ones not counted), on all replicas together; see Retry-After';
const ENDPOINT_WRITE_ERRORS = { ...WRITE_ERRORS, '404': 'endpoint_not_found', '429': SETTINGS_LIMITED };

const lifetime = z.string().regex(/^\d{1,7}(s|m|h|d)$/, 'must be a duration such as 30m, 1h or 7d').describe(
  'How long the link, and the session it opens, lives: 1s to 7d; 1h when left out',
);

export const portalSessionInput = z.strictObject({
  permissions: z.array(z.enum(PORTAL_PERMISSIONS))
    .refine((list) => new Set(list).size === list.length, 'must not repeat a permission')
    .optional()
    .describe('What the merchant may do beyond viewing; none (view only) when left out'),
  expiresIn: lifetime.optional(),
});

const sessionView = z.strictObject({
  merchantId: z.string(),
  permissions: z.array(z.enum(PORTAL_PERMISSIONS)),
  expiresAt: z.string(),
  csrfToken: z.string().describe('Send back in x-csrf-token on every write'),
});

const counts = { delivered: z.number().int(), retrying: z.number().int(), failed: z.number().int(), skipped: z.number().int() };
const health = z.strictObject({
  since: z.string(),
  ...counts,
  successRate: z.number().nullable(),
  medianResponseMs: z.number().int().nullable(),
  p95ResponseMs: z.number().int().nullable(),
  attempts: z.number().int(),
  hours: z.array(z.strictObject({ hour: z.string(), ...counts })).length(24),
  endpoints: z.array(z.strictObject({ endpointId: z.string(), ...counts })).describe(
    'The same counts per endpoint (ep_…), for each endpoint with a delivery in the window; deliveries logged before endpoints count in the totals only',
  ),
});

const overview = z.strictObject({
  merchantId: z.string(),
  endpoints: z.array(portalEndpointView).describe('Each of its endpoints; empty: none is set up'),
  health: health.nullable().describe('null: the delivery log is off here'),
});

const sentHeaders = z.record(z.string(), z.string()).describe('The headers each attempt carries (webhook-timestamp and webhook-signature change per attempt; no secret)');
const portalWebhook = webhookDetail.extend({ headers: sentHeaders });

const recoverQuery = z.strictObject({ since: listQuery.shape.since.unwrap().describe('Failed webhooks first seen at or after this time (ISO 8601)') });
const recoverPreview = z.strictObject({
  since: z.string(),
  count: z.number().int().min(0),
  webhooks: z.array(webhookSummary.pick({ webhookId: true, endpointId: true, event: true, references: true, firstSeenAt: true })).describe('One per failed delivery: a webhook that failed on two endpoints is here twice, once per endpoint'),
  truncated: z.boolean().describe('More than 1,000 failed: recover these, then again'),
});

/** Which endpoint's failure of the webhook to resend; every endpoint where it failed when left out. */
const resendQuery = z.strictObject({
  // An endpoint's id (ep_…): another string is the client's mistake (400), not "no failed webhook" (404).
  endpointId: endpointIdPath
    .optional()
    .describe('Resend only the failure on this endpoint (ep_…); left out: the failures on every endpoint where the webhook failed, each to its own endpoint'),
});
const RESEND_ERRORS = {
  '404': 'not_found: no unresolved failed webhook with this id (on this endpoint, when endpointId is given) for this merchant (never failed, or already resent)',
  '409':
    'webhook_disabled (the endpoint, or every endpoint, is disabled), event_not_subscribed, endpoint_deleted, resend_in_progress: ' +
    'as for the resend by reference (POST /nucleus/tnx/webhook)',
  '429': 'rate_limited: the merchant\'s resends share RESEND_RATE_LIMIT (a refusal is answered again from the replica\'s memory until Retry-After). too_many_resends: this webhook was resent 10 times in the last 24 hours. See Retry-After',
  '503': 'service_unavailable, resend_outcome_unknown, auth_unavailable: as for the resend by reference',
};

/** What the admin routes that mint and revoke portal links may answer besides their own. */
const SESSIONS_ADMIN_ERRORS = {
  '401': 'missing_credentials, invalid_credentials, token_expired',
  '403': 'insufficient_scope',
  '503': 'service_unavailable, log_unavailable, log_disabled: portal sessions are kept in the delivery log\'s PostgreSQL',
};

/** What a route of the session declares; `answer` is its success's description and schema, in the envelope. */
type SessionRoute = Pick<RouteDeclaration, 'summary' | 'description' | 'input' | 'errors'> & {
  status?: string;
  answer: [string, z.ZodType];
};

/** A route of the portal's session: its cookie, on a write (not GET) its CSRF token (x-csrf-token) too. */
function sessionRoute<const Id extends string, const Method extends RouteDeclaration['method']>(
  method: Method,
  path: string,
  operationId: Id,
  { status = '200', answer: [description, data], ...rest }: SessionRoute,
) {
  const output = { [status]: { description, schema: envelope(data) } };
  const security = method === 'get' ? [{ portalSession: [] }] : [{ portalSession: [], portalCsrf: [] }];
  return { operationId, method, path, ...rest, security, output };
}

export const PORTAL_ROUTES = [
  {
    operationId: 'resendWebhookById', method: 'post', path: '/nucleus/webhooks/{webhookId}/resend',
    summary: 'Resend one failed webhook by its webhook-id',
    description:
      'Exactly that webhook, not the other webhooks of its reference: on every endpoint where it failed (each copy to ' +
      'its own endpoint, never to one where it was delivered), or on endpointId alone. The same claims (once, across ' +
      'replicas), envelope and codes as the resend by reference. No request body is needed.',
    security: MERCHANT_AUTH,
    input: { params: webhookIdParams, query: resendQuery },
    output: { '200': { description: 'The webhook was sent again', schema: envelope(z.null()) } },
    errors: {
      '400': 'invalid_parameter: a malformed webhookId (its percent-encoding too, as %zz) or endpointId; unknown_parameter: a query parameter other than endpointId',
      '401': 'missing_credentials, invalid_credentials, token_expired',
      '403': 'merchant_mismatch',
      ...RESEND_ERRORS,
    },
  },
  {
    operationId: 'createPortalSession', method: 'post', path: '/admin/merchants/{merchantId}/portal-sessions',
    summary: 'A single-use link to the merchant portal',
    description:
      'For the dashboard\'s backend: open url in the merchant\'s browser, or in an iframe of a page on the same site. ' +
      'The token in its fragment works once, until expiresAt; it becomes a session cookie (HttpOnly, SameSite=Strict, ' +
      'Secure outside development mode, named __Host- on https) living until expiresAt. The url starts with PORTAL_PUBLIC_URL, never ' +
      'with anything the request says. Viewing is always allowed; permissions grant the rest.',
    security: ADMIN_AUTH,
    input: { params: merchantIdParams, body: portalSessionInput, bodyRequired: false },
    output: { '201': { description: 'The link', schema: envelope(z.strictObject({ url: z.string(), expiresAt: z.string() })) } },
    errors: { ...SESSIONS_ADMIN_ERRORS, '400': 'invalid_merchant_id, invalid_body', '404': 'merchant_not_found' },
  },
  {
    operationId: 'revokePortalSessions', method: 'delete', path: '/admin/merchants/{merchantId}/portal-sessions',
    summary: "End every portal session of a merchant, and every link not used yet",
    description: 'For a leaked link or a merchant who left: whoever holds a session or an unused link loses it at once, on every replica.',
    security: ADMIN_AUTH,
    input: { params: merchantIdParams },
    output: { '200': { description: 'What was ended', schema: envelope(z.strictObject({ sessions: z.number().int(), links: z.number().int() })) } },
    errors: { ...SESSIONS_ADMIN_ERRORS, '400': 'invalid_merchant_id' },
  },
  sessionRoute('post', '/portal/api/logout', 'portalLogout', {
    summary: 'End this session (the page\'s Log out)',
    answer: ['Logged out; Set-Cookie clears the cookie', z.null()], errors: WRITE_ERRORS,
  }),
  {
    operationId: 'portalPage', method: 'get', path: '/portal/',
    summary: 'The merchant portal (HTML); its script and style are /portal/portal.js and /portal/portal.css',
    output: { '200': { description: 'The page', mediaType: 'text/html' } },
  },
  {
    operationId: 'openPortalSession', method: 'post', path: '/portal/api/session',
    summary: 'Exchange a link\'s token for a session cookie (the page does this)',
    description:
      'A request carrying a live session of another merchant than the link\'s is refused (409) unless replaceSession is true: ' +
      'the page asks first, naming both, so that a link another merchant sent does not swap the session unseen (a login CSRF). ' +
      'A session replaced (confirmed, or of the same merchant) is ended.',
    input: { body: z.strictObject({ token: z.string().min(1).max(200), replaceSession: z.boolean().optional() }), bodyRequired: true },
    output: { '201': { description: 'Session opened; Set-Cookie carries it', schema: envelope(sessionView) } },
    errors: {
      '400': 'invalid_body',
      '401': 'portal_link_used: the link was opened already; portal_link_expired; portal_link_invalid',
      '403': 'cross_origin_write: Origin or Sec-Fetch-Site says the request does not come from the portal\'s page (a login CSRF); the link stays unused',
      '409': 'portal_session_other_merchant: the request carries a live session of another merchant and no replaceSession: true; the message names both merchants, and the link stays unused',
      '429': 'rate_limited: at most 30 link exchanges a minute per client address (a forged token, or one this replica already refused, is answered without counting), on all replicas together; see Retry-After',
      '503': 'log_unavailable, log_disabled, service_unavailable',
    },
  },
  sessionRoute('get', '/portal/api/session', 'getPortalSession', {
    summary: 'The session: merchant, permissions, expiry and CSRF token',
    answer: ['The session', sessionView], errors: READ_ERRORS,
  }),
  sessionRoute('get', '/portal/api/overview', 'portalOverview', {
    summary: "The merchant's endpoints and its webhooks' health over the last 24 hours",
    answer: ['Overview', overview], errors: READ_ERRORS,
  }),
  sessionRoute('get', '/portal/api/webhooks', 'portalListWebhooks', {
    summary: 'The session\'s merchant\'s webhooks (the delivery log)',
    input: { query: listQuery },
    answer: ['A page', webhookPage.shape.data], errors: READ_ERRORS,
  }),
  sessionRoute('get', '/portal/api/webhooks/{webhookId}', 'portalGetWebhook', {
    summary: 'One webhook: payload, headers, every attempt',
    input: { params: webhookIdParams },
    answer: ['The webhook', portalWebhook], errors: { ...READ_ERRORS, '404': 'webhook_not_found' },
  }),
  sessionRoute('post', '/portal/api/webhooks/{webhookId}/resend', 'portalResendWebhook', {
    summary: 'Resend one failed webhook (permission resend): on every endpoint where it failed, or on endpointId',
    input: { params: webhookIdParams, query: resendQuery },
    answer: ['Sent again', z.null()],
    errors: { ...WRITE_ERRORS, '400': `${WRITE_ERRORS['400']}; unknown_parameter: a query parameter other than endpointId`, ...RESEND_ERRORS },
  }),
  sessionRoute('get', '/portal/api/recover', 'portalRecoverPreview', {
    summary: 'What "resend everything that failed since" would resend (the dry run)',
    input: { query: recoverQuery },
    answer: ['The failed webhooks', recoverPreview],
    errors: {
      ...READ_ERRORS,
      '403': "cross_origin_write: a count that starts a round (a session that may resend) whose Origin or Sec-Fetch-Site says it does not come from the portal's page",
      '429': 'rate_limited, too_many_concurrent_queries: as every read; and at most 10 Recover rounds a day per merchant (a round starts with this count, for a session that may resend; a count refused, 429 or 503, gives its round back); see Retry-After',
    },
  }),
  sessionRoute('get', BASE, 'portalListEndpoints', {
    summary: "The session's merchant's endpoints: URL, events, state, rate and failing clock of each",
    answer: ['The endpoints', portalEndpointList], errors: ENDPOINT_READ_ERRORS,
  }),
  sessionRoute('post', BASE, 'portalCreateEndpoint', {
    summary: 'Add an endpoint (permission manage-endpoint); its secret is in this answer only',
    description: 'Validated as the admin API does: https outside development mode, no credentials, no fragment, no private address literal, a URL the merchant does not send to yet.',
    input: { body: endpointInputSchema, bodyRequired: true },
    status: '201',
    answer: ['Added; secret is shown this once', portalEndpointView.extend({ secret: z.string().regex(/^whsec_/) })],
    errors: {
      ...WRITE_ERRORS,
      '409': 'endpoint_limit: the merchant has MAX_ENDPOINTS_PER_MERCHANT endpoints already; endpoint_url_taken',
      '429': SETTINGS_LIMITED,
    },
  }),
  sessionRoute('get', `${BASE}/{endpointId}`, 'portalGetEndpoint', {
    summary: 'One endpoint (never its secret)',
    input: { params: portalEndpointParams },
    answer: ['The endpoint', portalEndpointView], errors: { ...ENDPOINT_READ_ERRORS, '404': 'endpoint_not_found' },
  }),
  sessionRoute('patch', `${BASE}/{endpointId}`, 'portalUpdateEndpoint', {
    summary: 'Change the URL, description, events, throttle, order per reference or enable/disable one endpoint (permission manage-endpoint)',
    description: 'A JSON merge patch: "events": null goes back to every event, "maxPerSecond": null removes the throttle. Validated as the admin API does.',
    input: { params: portalEndpointParams, body: endpointPatchSchema, bodyRequired: true },
    answer: ['Changed', portalEndpointView],
    errors: {
      ...ENDPOINT_WRITE_ERRORS,
      '409': 'endpoint_url_taken; endpoint_disabled_by_operator: the platform turned it off, only the platform turns it on or changes its URL',
    },
  }),
  sessionRoute('delete', `${BASE}/{endpointId}`, 'portalDeleteEndpoint', {
    summary: 'Remove one endpoint: nothing more is sent to it (permission manage-endpoint)',
    input: { params: portalEndpointParams },
    answer: ['Removed', z.strictObject({ deleted: z.string() })],
    errors: {
      ...ENDPOINT_WRITE_ERRORS,
      '409': 'endpoint_disabled_by_operator: the platform turned it off, only the platform deletes it',
    },
  }),
  sessionRoute('post', `${BASE}/{endpointId}/secret/rotate`, 'portalRotateSecret', {
    summary: "Rotate one endpoint's secret with a grace period (permission manage-secret); the new one is shown this once, the other endpoints keep theirs",
    // The admin API's body, so that a refusal names the field in the same words ("unknown field grace; allowed: graceSeconds").
    input: { params: portalEndpointParams, body: rotateInputSchema, bodyRequired: false },
    answer: ['Rotated', rotated], errors: { ...ENDPOINT_WRITE_ERRORS, '409': 'too_many_secrets' },
  }),
  sessionRoute('post', `${BASE}/{endpointId}/test`, 'portalSendTestEvent', {
    summary: 'Send this endpoint a sample of an event with a TEST- reference, delivered and logged like any other (permission manage-endpoint)',
    input: { params: portalEndpointParams, body: testEventBody, bodyRequired: true },
    status: '202', answer: ['Published', z.strictObject({ webhookId: z.string(), reference: z.string() })],
    errors: {
      ...WRITE_ERRORS,
      '404': 'endpoint_not_found',
      '409': 'webhook_disabled: the endpoint is disabled; event_not_subscribed: the endpoint does not receive this event (nothing is sent, as for a live event)',
      '429': 'rate_limited: at most 10 test events a minute per merchant, on all replicas together; see Retry-After',
    },
  }),
] as const satisfies readonly RouteDeclaration[];
