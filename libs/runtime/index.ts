export { runUntilSignal, type Running } from './run.js';
export { Cleanup, stopBudget } from './stop-budget.js';
export { within } from './timers.js';
export { RetryingBatcher, throttledWarning, WriteRefusedError } from './batcher.js';
export { runProgram } from './entry.js';
export { BoundedMap } from './bounded-map.js';
export { StartOnce } from './start-once.js';
export { NamedError } from './named-error.js';
