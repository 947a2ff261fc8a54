export { type CircuitKey, type HandedWait, type WaitEnd, type WaitKey, type WaitPut, type WaitPutReason, type WaitReason, type WaitRow, WaitStore, WAIT_TAKE_LIMIT, CIRCUIT_CHANNEL, type CircuitState, circuitOfPayload } from './store.js';
export { WAIT_BATCHES_CONFIRMING, WaitScheduler, type WaitSchedulerOptions } from './scheduler.js';
export { type TakeResult, WaitTaker } from './taker.js';
export { WaitWriter } from './writer.js';
export { respaceThrottled, throttleQueueCell } from './throttle-queue.js';
