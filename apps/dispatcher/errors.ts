import { NamedError } from '../../libs/runtime/index.js';

export type InvalidCode = 'too-large' | 'not-json' | 'invalid-envelope' | 'missing-reference' | 'unknown-merchant' | 'invalid-message-id' | 'internal-error' | 'wait-not-ended' | 'upstream-x-death';

/** The message can never be delivered as it is: it is parked in `invalid` with the reason, not retried. */
export class InvalidMessageError extends NamedError {
  constructor(readonly code: InvalidCode, readonly detail: string) {
    super(`${code}: ${detail}`);
  }
}
