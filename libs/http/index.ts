export type { WebhookHttpClient, WebhookRequest, WebhookResponse } from './client.js';
export { DeliveryFailedError, WebhookBlockedError, WebhookNetworkError, WebhookRejectedError, WebhookTimeoutError } from './errors.js';
export { isBlockedAddress } from './address-guard.js';
export { createGotClient, type GotClientOptions } from './got-client.js';
export { createUndiciClient, type UndiciClientOptions } from './undici-client.js';
