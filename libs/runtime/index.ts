export { runUntilSignal, type Running } from './run.js';
export { stopBudget } from './stop-budget.js';
export { runProgram } from './entry.js';
