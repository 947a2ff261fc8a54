export { returnCell, stretchCells, sweepCells, takeCell } from './gcra.js';
