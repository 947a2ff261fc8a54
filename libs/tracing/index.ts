export { ATTR, MESSAGING_SYSTEM, safeUrl } from './attributes.js';
export { activeIds, contextFromHeaders, inSpan, linkActiveSpanTo, markFailed, SpanKind, tracer, tracingActive } from './spans.js';
export { childSpan, injectSpan, publishChild, publishIn, publishSpan, spanFromHeaders, spanLogFields } from './spans.js';
export { startTracing, stoppingTracing, type Tracing } from './setup.js';
export type { Span } from '@opentelemetry/api';
