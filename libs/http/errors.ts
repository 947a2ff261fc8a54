/** What a merchant is told of a failed attempt: never an address or OS message (no oracle on our network). */
export const ATTEMPT_ERROR_CLASSES = ['blocked_address', 'dns_failure', 'connection_refused', 'timeout', 'tls_error', 'network_error', 'http_<status>'] as const;
export type AttemptErrorClass = Exclude<(typeof ATTEMPT_ERROR_CLASSES)[number], 'http_<status>'> | `http_${number}`;

export abstract class DeliveryFailedError extends Error {
  readonly status: number | undefined = undefined;

  /** Without a stack: a failed attempt is an outcome, not a fault, and a stack is costly. */
  constructor(message: string) {
    const limit = Error.stackTraceLimit;
    Error.stackTraceLimit = 0;
    super(message);
    Error.stackTraceLimit = limit;
    this.name = new.target.name;
  }

  abstract readonly errorClass: AttemptErrorClass;
}

export class WebhookRejectedError extends DeliveryFailedError {
  /** `date`: the response's Date header, for a Retry-After that is an HTTP date. */
  constructor(override readonly status: number, readonly retryAfter?: string, readonly date?: string) {
    super(`HTTP ${status}`);
  }

  get errorClass(): AttemptErrorClass {
    return `http_${this.status}`;
  }
}

export class WebhookTimeoutError extends DeliveryFailedError {
  readonly errorClass = 'timeout';
  constructor(timeoutMs: number) {
    super(`timeout after ${timeoutMs} ms`);
  }
}

export class WebhookNetworkError extends DeliveryFailedError {
  readonly errorClass: AttemptErrorClass;
  constructor(readonly code: string, detail: string) {
    super(`${code}: ${detail}`);
    this.errorClass = networkErrorClass(code);
  }
}

/** The URL resolves to an address webhooks may not reach: it fails at once. */
export class WebhookBlockedError extends DeliveryFailedError {
  readonly errorClass = 'blocked_address';
  constructor(detail: string) {
    super(`blocked: ${detail}`);
  }
}

// getaddrinfo's, and c-ares' (the guarded lookup: ETIMEOUT, not ETIMEDOUT, is its name servers' silence).
const DNS_CODES = new Set(['ENOTFOUND', 'EAI_AGAIN', 'EAI_FAIL', 'EAI_NONAME', 'EAI_NODATA', 'ENODATA', 'ESERVFAIL', 'ENOTIMP', 'EREFUSED', 'ETIMEOUT', 'EBADRESP', 'EFORMERR', 'EBADNAME', 'ECANCELLED']);
const TLS_CODES = new Set(['EPROTO', 'DEPTH_ZERO_SELF_SIGNED_CERT', 'SELF_SIGNED_CERT_IN_CHAIN', 'UNABLE_TO_VERIFY_LEAF_SIGNATURE', 'UNABLE_TO_GET_ISSUER_CERT_LOCALLY', 'CERT_HAS_EXPIRED', 'CERT_NOT_YET_VALID', 'CERT_REVOKED', 'CERT_UNTRUSTED', 'CERT_REJECTED', 'HOSTNAME_MISMATCH']);

export function networkErrorClass(code: string): AttemptErrorClass {
  if (code === 'ECONNREFUSED') return 'connection_refused';
  if (code === 'ETIMEDOUT' || code === 'UND_ERR_CONNECT_TIMEOUT' || code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT') return 'timeout';
  if (DNS_CODES.has(code)) return 'dns_failure';
  if (TLS_CODES.has(code) || code.startsWith('ERR_TLS_') || code.startsWith('ERR_SSL_') || code.startsWith('ERR_OSSL_')) return 'tls_error';
  if (code === 'EBLOCKEDADDRESS') return 'blocked_address';
  return 'network_error';
}
