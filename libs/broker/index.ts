export { BrokerConnection, type BrokerConnectionOptions } from './connection.js';
export type { Consumer, ConsumeOptions, Delivery } from './consumers.js';
export { BrokerUnavailableError, BrokerUnroutableError, PublishUnconfirmedError } from './errors.js';
export { redacted } from './urls.js';
export { copyProperties, type HeldMessage, moveMessage, sendDeclaring } from './move.js';
