export { BrokerConnection, type BrokerConnectionOptions, type Consumer, type ConsumeOptions, type Delivery } from './connection.js';
export { BrokerUnavailableError, BrokerUnroutableError } from './errors.js';
