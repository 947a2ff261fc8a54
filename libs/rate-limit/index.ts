export { type GcraAnswer, type GcraLimit, stretchCells, sweepCells, takeCell } from './gcra.js';
