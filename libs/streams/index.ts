export { appendCheckpoint, CHECKPOINT, isCheckpoint, offsetOf } from './entries.js';
export { fingerprintAt, fingerprintOf, landCheckpoint } from './probe.js';
export { FAILED_ROLLOVER_EVERY_MS, ROLLOVER, StreamRollover } from './rollover.js';
