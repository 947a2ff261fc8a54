import { DeliveryFailedError } from '../../libs/http/index.js';

export type InvalidCode =
  | 'too-large'
  | 'not-json'
  | 'invalid-envelope'
  | 'missing-reference'
  | 'unknown-merchant'
  | 'invalid-message-id'
  | 'internal-error';

/** The message can never be delivered as it is: it is parked in `invalid` with the reason, not retried. */
export class InvalidMessageError extends Error {
  constructor(readonly code: InvalidCode, readonly detail: string) {
    super(`${code}: ${detail}`);
    this.name = 'InvalidMessageError';
  }
}

/**
 * Never attempted, and the webhook's schedule span is over while its endpoint's circuit is open:
 * it goes to `failed` carrying the last real error seen (its own, or the endpoint's).
 */
export class CircuitOpenError extends DeliveryFailedError {
  readonly status = undefined;
  constructor(endpoint: string, failures: number, lastError: string | undefined) {
    super(`circuit open: the endpoint failed ${failures} times in a row${lastError ? `; last error: ${lastError}` : ''}`);
    this.name = 'CircuitOpenError';
  }
}

const UNAVAILABLE_MESSAGES = {
  'webhook-disabled': 'webhook disabled',
  'merchant-removed': 'merchant removed from the directory',
  'event-not-subscribed': 'event not in the webhook\'s events',
} as const;

/**
 * The merchant's webhook was disabled, the merchant removed, or the event left out of the
 * webhook's events, after this webhook was accepted.
 */
export class WebhookUnavailableError extends DeliveryFailedError {
  readonly status = undefined;
  constructor(readonly reason: keyof typeof UNAVAILABLE_MESSAGES) {
    super(UNAVAILABLE_MESSAGES[reason]);
    this.name = 'WebhookUnavailableError';
  }
}
