export type { WebhookHttpClient, WebhookRequest, WebhookResponse } from './client.js';
export { DeliveryFailedError, WebhookNetworkError, WebhookRejectedError, WebhookTimeoutError } from './errors.js';
export { createGotClient, type GotClientOptions } from './got-client.js';
