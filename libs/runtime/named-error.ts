/** An Error named after its class (BrokerUnavailableError, not Error): what logs and a stack's first line show. */
export class NamedError extends Error {
  constructor(message?: string, options?: ErrorOptions) {
    super(message, options);
    this.name = new.target.name;
  }
}
