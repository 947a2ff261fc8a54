export { appendCheckpoint, CHECKPOINT, isCheckpoint, offsetOf } from './entries.js';
export { fingerprintAt, fingerprintOf, landCheckpoint } from './probe.js';
