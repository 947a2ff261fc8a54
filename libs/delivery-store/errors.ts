/** PostgreSQL could not be reached or answered with a connection-level error: queries answer 503. */
export class LogUnavailableError extends Error {
  constructor(cause: unknown) {
    super(`delivery log database unavailable: ${(cause as Error)?.message ?? String(cause)}`, { cause });
    this.name = 'LogUnavailableError';
  }
}

/** A list cursor that this service did not give out. */
export class InvalidCursorError extends Error {
  constructor() {
    super('The cursor is not one this service gave; pass nextCursor from the previous page');
    this.name = 'InvalidCursorError';
  }
}
