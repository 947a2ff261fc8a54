export { appendCheckpoint, isCheckpoint, offsetOf } from './entries.js';
export { StreamTail, type StreamTailOptions } from './stream-tail.js';
export { ReadBacks } from './read-backs.js';
