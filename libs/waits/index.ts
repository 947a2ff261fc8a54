export { type HandedWait, type WaitEnd, type WaitKey, type WaitPut, type WaitPutReason, WaitStore, WAIT_TAKE_LIMIT } from './store.js';
export { CIRCUIT_CHANNEL, type CircuitState, circuitOfPayload } from './circuits.js';
export { WAIT_BATCHES_CONFIRMING, WaitScheduler } from './scheduler.js';
export { type TakeResult, WaitTaker } from './taker.js';
export { WaitWriter } from './writer.js';
export { respaceThrottled, throttleQueueCell } from './throttle-queue.js';
