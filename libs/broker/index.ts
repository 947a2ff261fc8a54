export { BrokerConnection, type Consumer, type ConsumeOptions, type Delivery } from './connection.js';
export { BrokerUnavailableError, BrokerUnroutableError, PublishUnconfirmedError } from './errors.js';
export { redacted } from './urls.js';
export { copyProperties, type HeldMessage, moveMessage, sendDeclaring } from './move.js';
