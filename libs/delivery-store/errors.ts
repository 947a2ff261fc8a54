import { NamedError } from '../runtime/named-error.js';

/** PostgreSQL could not be reached or answered with a connection-level error: queries answer 503. */
export class LogUnavailableError extends NamedError {
  constructor(cause: unknown) {
    super(`delivery log database unavailable: ${(cause as Error)?.message ?? String(cause)}`, { cause });
  }
}

/** A read cancelled by the statement timeout (57014): still a 503, but a narrower read may avoid it. */
export class LogQueryTimeoutError extends LogUnavailableError {}

export class InvalidCursorError extends NamedError {
  constructor() {
    super('The cursor is not one this service gave; pass nextCursor from the previous page');
  }
}

/** A filter holding a value PostgreSQL cannot take: the request is wrong (400, never 503). */
export class InvalidFilterError extends NamedError {
  constructor(readonly parameter: string, reason: string) {
    super(`The ${parameter} parameter is not valid: ${reason}`);
  }
}
