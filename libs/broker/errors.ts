import { NamedError } from '../runtime/named-error.js';

/** The broker could not take a publish or an operation right now; the caller retries or answers 503. */
export class BrokerUnavailableError extends NamedError {}

/** A publish not confirmed within its deadline (flow control: a memory or disk alarm): it may still be stored later. */
export class PublishUnconfirmedError extends BrokerUnavailableError {
  constructor(readonly deadlineMs: number) {
    super(`publish not confirmed within ${deadlineMs} ms`);
  }
}

/** A mandatory publish confirmed but routed nowhere (a deleted queue or binding): not stored, the caller keeps the original. */
export class BrokerUnroutableError extends NamedError {
  constructor(readonly exchange: string, readonly routingKey: string, replyText: string) {
    super(`no queue took the message (exchange "${exchange}", routing key "${routingKey}": ${replyText})`);
  }
}

/** A signal (Ctrl-C, SIGTERM) arrived while the program was still starting: it stops instead. */
export class StartAbortedError extends NamedError {
  constructor() {
    super('start-up interrupted by a signal');
  }
}
