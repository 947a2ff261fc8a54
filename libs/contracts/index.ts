export * from './events.js';
export { rawMember } from './raw-json.js';
export { sampleEvent } from './samples.js';
export * from './headers.js';
