export type { WebhookHttpClient, WebhookRequest, WebhookResponse } from './client.js';
export { ATTEMPT_ERROR_CLASSES, type AttemptErrorClass, DeliveryFailedError, networkErrorClass, WebhookBlockedError, WebhookNetworkError, WebhookRejectedError, WebhookTimeoutError } from './errors.js';
export { isBlockedAddress } from './address-guard.js';
export { createUndiciClient } from './undici-client.js';
