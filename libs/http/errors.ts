/** One delivery attempt did not succeed; the dispatcher retries it on the schedule. */
export abstract class DeliveryFailedError extends Error {
  /** The HTTP status, when the merchant answered at all. */
  abstract readonly status: number | undefined;
}

export class WebhookRejectedError extends DeliveryFailedError {
  constructor(readonly status: number, readonly retryAfter?: string) {
    super(`HTTP ${status}`);
    this.name = 'WebhookRejectedError';
  }
}

export class WebhookTimeoutError extends DeliveryFailedError {
  readonly status = undefined;
  constructor(timeoutMs: number) {
    super(`timeout after ${timeoutMs} ms`);
    this.name = 'WebhookTimeoutError';
  }
}

export class WebhookNetworkError extends DeliveryFailedError {
  readonly status = undefined;
  constructor(readonly code: string, detail: string) {
    super(`${code}: ${detail}`);
    this.name = 'WebhookNetworkError';
  }
}

/** The URL resolves to an address webhooks may not reach: retrying cannot help, so it fails at once. */
export class WebhookBlockedError extends DeliveryFailedError {
  readonly status = undefined;
  constructor(detail: string) {
    super(`blocked: ${detail}`);
    this.name = 'WebhookBlockedError';
  }
}
