export { runUntilSignal, type Running } from './run.js';
export { stopBudget } from './stop-budget.js';
