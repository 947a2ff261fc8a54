/** An answer to the client in the spec's envelope: `message` for people, `error.code` for programs. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
    this.name = 'ApiError';
  }
}

export const badRequest = (code: string, message: string) => new ApiError(400, code, message);
export const unauthorized = (code: string, message: string) =>
  new ApiError(401, code, message, { 'www-authenticate': 'Bearer' });
export const forbidden = (message: string) => new ApiError(403, 'merchant_mismatch', message);
export const notFound = (code: string, message: string) => new ApiError(404, code, message);
export const rateLimited = (retryAfterSeconds: number) =>
  new ApiError(429, 'rate_limited', 'Too many resend requests; try again later', { 'retry-after': String(retryAfterSeconds) });
export const unavailable = (message: string) =>
  new ApiError(503, 'service_unavailable', message, { 'retry-after': '5' });

export const authUnavailable = () =>
  new ApiError(503, 'auth_unavailable', 'The auth service could not be reached to check the access token; try again shortly', {
    'retry-after': '5',
  });

export function errorBody(error: ApiError): { message: string; error: { code: string; status: number }; data: null } {
  return { message: error.message, error: { code: error.code, status: error.status }, data: null };
}
