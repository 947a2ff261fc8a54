export * from './events.js';
export { messageFromLoggedBody, rawMember } from './raw-json.js';
export { sampleEvent } from './samples.js';
export * from './headers.js';
export * from './copy-headers.js';
export { merchantIdSchema, PLATFORM_MERCHANT_ID } from './merchant-id.js';
export { EVENT_SUMMARIES, webhookExample, webhookPayloadSchema } from './webhook-payloads.js';
