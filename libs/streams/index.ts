export { appendCheckpoint, fingerprintAt, fingerprintOf, landCheckpoint, offsetOf } from './probe.js';
export { FAILED_ROLLOVER_EVERY_MS, StreamRollover } from './rollover.js';
