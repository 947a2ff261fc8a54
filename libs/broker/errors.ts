/** The broker could not take a publish or an operation right now; the caller retries or answers 503. */
export class BrokerUnavailableError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'BrokerUnavailableError';
  }
}
