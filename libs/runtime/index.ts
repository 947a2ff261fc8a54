export { runUntilSignal } from './run.js';
