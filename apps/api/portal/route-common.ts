/** What the portal's route declarations share (routes.ts, endpoint-routes.ts): who may call, and the errors of a read or a write. */

/** A portal session's cookie; a write also needs its CSRF token in x-csrf-token. */
export const PORTAL_AUTH = [{ portalSession: [] }] as const;
export const PORTAL_WRITE_AUTH = [{ portalSession: [], portalCsrf: [] }] as const;

export const READ_ERRORS = {
  '400': 'invalid_parameter, unknown_parameter',
  '401': 'portal_session_required: no session cookie, or the session has expired; open a new link',
  '429': "rate_limited, too_many_concurrent_queries: the merchant's log reads; see Retry-After",
  '503': 'log_unavailable, log_disabled: the portal reads the delivery log',
};

export const WRITE_ERRORS = {
  '400': 'invalid_body, invalid_parameter, invalid_settings (the message names the field)',
  '401': 'portal_session_required',
  '403':
    'csrf_token_invalid: x-csrf-token missing or not this session\'s; permission_denied: the link did not grant this; ' +
    'cross_origin_write: Origin or Sec-Fetch-Site says the request does not come from the portal\'s page',
  '413': 'Request body too large',
  '503': 'service_unavailable, log_unavailable',
};
