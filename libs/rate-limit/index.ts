export { type GcraAnswer, type GcraLimit, returnCell, stretchCells, sweepCells, takeCell } from './gcra.js';
