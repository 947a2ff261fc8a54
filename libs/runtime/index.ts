export { runUntilSignal, type Running } from './run.js';
export { abortable } from './abortable.js';
export { stopBudget } from './stop-budget.js';
export { RetryingBatcher, throttledWarning } from './batcher.js';
