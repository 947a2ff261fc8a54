export { appendCheckpoint, offsetOf } from './entries.js';
export { fingerprintAt, fingerprintOf, landCheckpoint } from './probe.js';
export { FAILED_ROLLOVER_EVERY_MS, StreamRollover } from './rollover.js';
