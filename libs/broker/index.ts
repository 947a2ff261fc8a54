export {
  BrokerConnection,
  type BrokerConnectionOptions,
  type Consumer,
  type ConsumeOptions,
  type Delivery,
  type Reader,
  type ReaderOptions,
} from './connection.js';
export { within } from './channels.js';
export { BROKER_BACKOFF, BROKER_START_DEADLINE_MS } from './timing.js';
export { BrokerAccessRefusedError, BrokerUnavailableError, BrokerUnroutableError, StartAbortedError } from './errors.js';
export { copyProperties, type HeldMessage, moveMessage, type MoveOptions, type MoveResult, publishCopy } from './move.js';
