export { BrokerConnection, type BrokerConnectionOptions, type Consumer, type ConsumeOptions, type Delivery } from './connection.js';
export { BrokerUnavailableError } from './errors.js';
