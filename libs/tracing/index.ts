export { ATTR, MESSAGING_SYSTEM, safeUrl } from './attributes.js';
export { contextFromHeaders, injectInto } from './carrier.js';
export { activeIds, inSpan, linkActiveSpanTo, linkFromHeaders, markFailed, publishSpan, recordingSpan, SpanKind, tracer } from './spans.js';
export { tracingActive } from './state.js';
export { ExplicitSpan, publishChild, publishIn, spanFromHeaders } from './explicit-spans.js';
export { startTracing, stoppingTracing, type Tracing } from './setup.js';
export { ATTR_CODE, encodeAttributes } from './span-records.js';
