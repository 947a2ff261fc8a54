import { NamedError } from '../runtime/named-error.js';

export class BrokerUnavailableError extends NamedError {}

/** Not confirmed within its deadline (flow control): it may still be stored later. */
export class PublishUnconfirmedError extends BrokerUnavailableError {
  constructor(readonly deadlineMs: number) {
    super(`publish not confirmed within ${deadlineMs} ms`);
  }
}

/** A mandatory publish confirmed but routed nowhere: not stored. */
export class BrokerUnroutableError extends NamedError {
  constructor(readonly exchange: string, readonly routingKey: string, replyText: string) {
    super(`no queue took the message (exchange "${exchange}", routing key "${routingKey}": ${replyText})`);
  }
}

export class StartAbortedError extends NamedError {
  constructor() {
    super('start-up interrupted by a signal');
  }
}
