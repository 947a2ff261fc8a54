/** The broker could not take a publish or an operation right now; the caller retries or answers 503. */
export class BrokerUnavailableError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'BrokerUnavailableError';
  }
}

/**
 * The broker confirmed a mandatory publish but routed it nowhere: the target queue or binding is
 * gone (an operator deleted it). The message was not stored; the caller keeps the original.
 */
export class BrokerUnroutableError extends Error {
  constructor(readonly exchange: string, readonly routingKey: string, replyText: string) {
    super(`no queue took the message (exchange "${exchange}", routing key "${routingKey}": ${replyText})`);
    this.name = 'BrokerUnroutableError';
  }
}
