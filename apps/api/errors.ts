import { NamedError } from '../../libs/runtime/index.js';

/** Every `error.code` the API answers with: the OpenAPI document lists exactly these. */
export const ERROR_CODES = [
  'missing_reference', 'invalid_reference', 'unknown_parameter', 'invalid_parameter', 'invalid_body', 'bad_request',
  'missing_credentials', 'invalid_credentials', 'token_expired', 'merchant_mismatch',
  'not_found', 'webhook_not_found', 'webhook_disabled', 'event_not_subscribed', 'endpoint_deleted',
  'resend_in_progress', 'resend_outcome_unknown', 'route_not_found', 'method_not_allowed',
  'body_too_large', 'header_too_large', 'rate_limited', 'too_many_resends', 'too_many_concurrent_queries',
  'service_unavailable', 'auth_unavailable', 'log_unavailable', 'log_disabled', 'internal_error',
  'insufficient_scope', 'invalid_merchant_id', 'invalid_settings', 'invalid_idempotency_key', 'idempotency_key_reused',
  'precondition_failed', 'too_many_secrets', 'merchant_not_found', 'public_key_taken',
  'endpoint_limit', 'endpoint_url_taken', 'endpoint_not_found',
  // The merchant portal's
  'portal_session_required', 'portal_link_used', 'portal_link_expired', 'portal_link_invalid',
  'csrf_token_invalid', 'permission_denied', 'cross_origin_write', 'endpoint_disabled_by_operator',
  'portal_session_other_merchant',
] as const;
export type ErrorCode = (typeof ERROR_CODES)[number];

/** An answer to the client in the spec's envelope: `message` for people, `error.code` for programs. */
export class ApiError extends NamedError {
  constructor(
    readonly status: number,
    readonly code: ErrorCode,
    message: string,
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
  }
}

export const badRequest = (code: ErrorCode, message: string) => new ApiError(400, code, message);
export const unauthorized = (code: ErrorCode, message: string) =>
  new ApiError(401, code, message, { 'www-authenticate': 'Bearer' });
export const notFound = (code: ErrorCode, message: string) => new ApiError(404, code, message);
export const rateLimited = (retryAfterSeconds: number, what = 'resend requests') =>
  new ApiError(429, 'rate_limited', `Too many ${what}; try again later`, { 'retry-after': String(retryAfterSeconds) });
export const unavailable = (message: string) =>
  new ApiError(503, 'service_unavailable', message, { 'retry-after': '5' });

export const retryAfter = (ms: number) => ({ 'retry-after': String(Math.ceil(ms / 1000)) });

export function errorBody(error: ApiError): { message: string; error: { code: string; status: number }; data: null } {
  return { message: error.message, error: { code: error.code, status: error.status }, data: null };
}
