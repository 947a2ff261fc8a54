import { DeliveryFailedError } from '../../libs/http/index.js';

export type InvalidCode =
  | 'too-large'
  | 'not-json'
  | 'invalid-envelope'
  | 'missing-reference'
  | 'unknown-merchant'
  | 'internal-error';

/** The message can never be delivered as it is: it is parked in `invalid` with the reason, not retried. */
export class InvalidMessageError extends Error {
  constructor(readonly code: InvalidCode, readonly detail: string) {
    super(`${code}: ${detail}`);
    this.name = 'InvalidMessageError';
  }
}

/** Not attempted: the endpoint's circuit is open after consecutive failures. Counts as a failed attempt. */
export class CircuitOpenError extends DeliveryFailedError {
  readonly status = undefined;
  constructor(endpoint: string, failures: number) {
    super(`circuit open: ${endpoint} failed ${failures} times in a row; not attempted`);
    this.name = 'CircuitOpenError';
  }
}
