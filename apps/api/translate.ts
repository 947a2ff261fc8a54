import { BrokerUnavailableError, BrokerUnroutableError } from '../../libs/broker/index.js';
import { InvalidCursorError, InvalidFilterError, LogQueryTimeoutError, LogUnavailableError } from '../../libs/delivery-store/index.js';
import {
  EndpointDeletedError,
  EventNotSubscribedError,
  FailureIndexUnavailableError,
  NothingToResendError,
  ResendInProgressError,
  ResendLimitError,
  ResendOutcomeUnknownError,
  ResendStoppedError,
  RESENDS_PER_WEBHOOK_PER_DAY,
  WebhookDisabledError,
} from '../../libs/failed/index.js';
import type { Logger } from '../../libs/logger/index.js';
import {
  AuditUnavailableError,
  DisabledByOperatorError,
  EndpointLimitError,
  EndpointNotFoundError,
  EndpointUrlTakenError,
  IdempotencyKeyReusedError,
  InvalidIdempotencyKeyError,
  InvalidSettingsError,
  MerchantNotFoundError,
  MerchantStoreUnavailableError,
  PublicKeyTakenError,
  SecretsKeyError,
  TooManySecretsError,
  VersionMismatchError,
} from '../../libs/merchants/index.js';
import { TooManyInFlightError } from './rate-limit.js';
import { ApiError, badRequest, notFound, retryAfter, unavailable } from './errors.js';
import { undecodableParameter } from './mount.js';

/**
 * The one place a thrown error becomes an answer: domain errors by class (never by message), Express's own by
 * their type, anything else a logged 500. `path` names the parameter of a route the router could not decode.
 */
export function toApiError(err: unknown, logger: Logger, path = ''): ApiError {
  if (err instanceof ApiError) return err;
  if (err instanceof URIError && (err as { status?: number }).status === 400) return undecodableParameter(path);
  if (err instanceof NothingToResendError) return notFound('not_found', 'No failed webhook for this reference');
  // Another resend holds the webhooks (under way, or its outcome unknown): resending now could deliver twice.
  if (err instanceof ResendInProgressError) {
    const message = 'A resend of this reference is under way or its outcome is not known yet; it may already be delivered. Do not resend before Retry-After';
    return new ApiError(409, 'resend_in_progress', message, retryAfter(err.retryAfterMs));
  }
  if (err instanceof ResendLimitError) {
    const message = `This webhook was resent ${RESENDS_PER_WEBHOOK_PER_DAY} times in the last 24 hours; try again later`;
    return new ApiError(429, 'too_many_resends', message, retryAfter(err.retryAfterMs));
  }
  // Resending to a webhook that is off would only fail again: say so, and keep the entry.
  if (err instanceof WebhookDisabledError) {
    if (err.endpointId !== undefined) return new ApiError(409, 'webhook_disabled', `The endpoint ${err.endpointId} is disabled; enable it on the dashboard, then resend`);
    return new ApiError(409, 'webhook_disabled', 'Webhooks are not enabled for this merchant; enable them on the dashboard, then resend');
  }
  // The failure's endpoint is gone: nowhere to resend it; the entry stays until retention.
  if (err instanceof EndpointDeletedError) {
    return new ApiError(409, 'endpoint_deleted', `The endpoint ${err.endpointIds.join(', ')} was deleted; its failed webhooks cannot be resent`);
  }
  if (err instanceof EventNotSubscribedError) {
    const message = `The webhook no longer receives ${err.events.join(', ')} events; add them to its events on the dashboard, then resend`;
    return new ApiError(409, 'event_not_subscribed', message);
  }
  // The republish may still be stored and delivered: the merchant must wait for the claim's lease.
  if (err instanceof ResendOutcomeUnknownError) {
    const message = 'The broker did not confirm a resent copy in time; it may still be delivered, so it stays claimed until Retry-After. A resend before then sends only the failures not tried yet';
    return new ApiError(503, 'resend_outcome_unknown', message, retryAfter(err.holdMs));
  }
  // Answered as what stopped it; PostgreSQL lost midway is not "nothing was resent".
  if (err instanceof ResendStoppedError) {
    if (!(err.cause instanceof FailureIndexUnavailableError)) return toApiError(err.cause, logger, path);
    if (err.sent > 0) return unavailable('The database became unavailable during the resend; what went out is not sent again, and a retry sends the rest; try again shortly');
    return unavailable('The database is unavailable; nothing was resent; try again shortly');
  }
  // No queue took a publish even after the topology was declared again: the broker's state, not the request.
  if (err instanceof BrokerUnavailableError || err instanceof BrokerUnroutableError) return unavailable('The message broker is unavailable; try again shortly');
  // Before LogUnavailableError, which it extends: same code, but the message says what helps.
  if (err instanceof LogQueryTimeoutError) {
    return new ApiError(503, 'log_unavailable', 'The delivery log query took too long; try again shortly, or narrow it (since and until, a lower limit)', retryAfter(5_000));
  }
  if (err instanceof LogUnavailableError) return new ApiError(503, 'log_unavailable', 'The delivery log database is unavailable; try again shortly', retryAfter(5_000));
  if (err instanceof TooManyInFlightError) {
    const message = 'Too many delivery log reads of this merchant at once; wait for the others to answer';
    return new ApiError(429, 'too_many_concurrent_queries', message, retryAfter(err.retryAfterSeconds * 1000));
  }
  if (err instanceof InvalidCursorError || err instanceof InvalidFilterError) return badRequest('invalid_parameter', err.message);
  if (err instanceof InvalidSettingsError) return badRequest('invalid_settings', err.message);
  if (err instanceof InvalidIdempotencyKeyError) return badRequest('invalid_idempotency_key', err.message);
  if (err instanceof IdempotencyKeyReusedError) {
    return new ApiError(422, 'idempotency_key_reused', 'This Idempotency-Key was used within the last 24 hours for a different request; use a new key');
  }
  if (err instanceof TooManySecretsError) return new ApiError(409, 'too_many_secrets', err.message);
  if (err instanceof MerchantNotFoundError) return notFound('merchant_not_found', `No merchant ${err.merchantId}`);
  if (err instanceof PublicKeyTakenError) return new ApiError(409, 'public_key_taken', 'Another merchant has this public key');
  if (err instanceof EndpointLimitError) return new ApiError(409, 'endpoint_limit', `This merchant has ${err.limit} endpoint${err.limit === 1 ? '' : 's'}, the most it may have (MAX_ENDPOINTS_PER_MERCHANT ${err.limit}); delete one first`);
  if (err instanceof EndpointUrlTakenError) return new ApiError(409, 'endpoint_url_taken', `Endpoint ${err.endpointId} of this merchant already has this URL`);
  if (err instanceof EndpointNotFoundError) return notFound('endpoint_not_found', `Merchant ${err.merchantId} has no endpoint ${err.endpointId}`);
  if (err instanceof DisabledByOperatorError) {
    return new ApiError(409, 'endpoint_disabled_by_operator', 'The platform turned this endpoint off: only the platform turns it on again, moves it to another URL or deletes it; ask the platform\'s support');
  }
  // An action whose audit entry PostgreSQL refused is not reported as done (libs/merchants/audit.ts).
  if (err instanceof AuditUnavailableError) {
    logger.error('audit entry not written: the request answered 503', { action: err.action, error: (err.cause as Error)?.message });
    return unavailable('The audit trail could not be written, so this is not confirmed as done; try again shortly');
  }
  if (err instanceof MerchantStoreUnavailableError) return unavailable('The merchant database is unavailable; try again shortly');
  // A replica not yet given the key a rotation of SECRETS_KEY seals with (merchants.md): a replica that has it can write.
  if (err instanceof SecretsKeyError) {
    logger.error('merchant write refused: its row is sealed with a key this replica lacks (SECRETS_KEY, SECRETS_KEY_PREVIOUS)', { keyId: err.keyId });
    return unavailable('This replica cannot change this merchant yet; try again shortly');
  }
  if (err instanceof VersionMismatchError) {
    return new ApiError(412, 'precondition_failed', 'The merchant changed since the version If-Match names; GET it again and redo the change');
  }
  const status = (err as { status?: number; statusCode?: number })?.status ?? (err as { statusCode?: number })?.statusCode;
  const type = (err as { type?: string })?.type;
  if (type === 'entity.parse.failed') return new ApiError(400, 'invalid_body', 'The request body is not valid JSON');
  if (type === 'charset.unsupported' || type === 'encoding.unsupported') {
    return new ApiError(400, 'invalid_body', 'The request body is in a charset or content encoding this API does not read: send UTF-8 JSON');
  }
  if (type === 'entity.too.large') return new ApiError(413, 'body_too_large', 'The request body is too large');
  if (typeof status === 'number' && status >= 400 && status < 500) return new ApiError(status, 'bad_request', 'The request could not be read');
  logger.error('request failed', { error: (err as Error)?.message });
  return new ApiError(500, 'internal_error', 'Something went wrong on our side');
}
