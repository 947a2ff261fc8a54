export { appendCheckpoint, CHECKPOINT, isCheckpoint, offsetOf } from './entries.js';
export { fingerprintAt, fingerprintOf, landCheckpoint } from './probe.js';
export { StreamTail, type StreamTailOptions } from './stream-tail.js';
export { ReadBacks } from './read-backs.js';
