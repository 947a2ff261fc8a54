import { type Attributes, type Context, context, propagation, ROOT_CONTEXT, type Span, SpanKind, trace, TraceFlags } from '@opentelemetry/api';
import { ATTR, MESSAGING_SYSTEM } from './attributes.js';
import { contextFromHeaders, endedAfter, tracer, tracingActive } from './spans.js';

/** Spans whose parent is passed by hand, not through the active context (AsyncLocalStorage costs every promise). */
function startIn(parent: Context, name: string, kind: SpanKind, attributes: Attributes | undefined): Span {
  const span = tracer().startSpan(name, { kind }, parent);
  if (attributes !== undefined && span.isRecording()) span.setAttributes(attributes);
  return span;
}

/** A span continuing the trace a message's headers carry, or starting one; undefined while tracing is off. */
export function spanFromHeaders(name: string, kind: SpanKind, headers: Record<string, unknown> | undefined, attributes?: Attributes): Span | undefined {
  if (!tracingActive()) return undefined;
  return startIn(contextFromHeaders(headers), name, kind, attributes);
}

/** Unsampled: its children would not be sampled either, so the caller gets it back. */
function unsampled(parent: Span | undefined): parent is Span {
  return parent !== undefined && (parent.spanContext().traceFlags & TraceFlags.SAMPLED) === 0;
}

/** A span under `parent`; pass `attributes` made once where it can be. */
export function childSpan(parent: Span, name: string, kind: SpanKind, attributes?: Attributes): Span {
  if (unsampled(parent)) return parent;
  return startIn(trace.setSpan(ROOT_CONTEXT, parent), name, kind, attributes);
}

/** Writes the span's context into headers; a copied `tracestate` without a valid traceparent must not join the trace. */
export function injectSpan(span: Span, headers: Record<string, unknown>): void {
  if ('tracestate' in headers) delete headers.tracestate;
  propagation.inject(trace.setSpan(ROOT_CONTEXT, span), headers);
}

const NO_FIELDS = {};

/** The ids a log line about the span's work carries. */
export function spanLogFields(span: Span | undefined): { trace_id?: string; span_id?: string } {
  if (span === undefined) return NO_FIELDS;
  const { traceId, spanId } = span.spanContext();
  return { trace_id: traceId, span_id: spanId };
}

/** Publish spans' constant attributes by destination, made once. */
const publishAttributes = new Map<string, Attributes>();

/** The producer span of a publish to `destination` in `parent`, for a caller that ends it itself. */
export function publishChild(parent: Span | Context, destination: string, webhookId?: string, attributes?: Attributes): Span {
  const parentSpan = 'spanContext' in parent ? parent : trace.getSpan(parent);
  if (unsampled(parentSpan)) return parentSpan;
  let constants = publishAttributes.get(destination);
  if (constants === undefined) {
    constants = { [ATTR.messagingSystem]: MESSAGING_SYSTEM, [ATTR.messagingOperationType]: 'send', [ATTR.messagingOperationName]: 'publish', [ATTR.messagingDestination]: destination };
    if (publishAttributes.size < 1_000) publishAttributes.set(destination, constants);
  }
  const span = startIn('spanContext' in parent ? trace.setSpan(ROOT_CONTEXT, parent) : parent, `publish ${destination}`, SpanKind.PRODUCER, constants);
  if (span.isRecording()) {
    if (webhookId !== undefined) span.setAttribute(ATTR.webhookId, webhookId);
    if (attributes) span.setAttributes(attributes);
  }
  return span;
}

/** `send()` in a producer span whose context `headers` carry, so the copy's consumer continues the trace. */
export async function publishIn<T>(
  parent: Span | Context | undefined,
  destination: string,
  headers: Record<string, unknown> | undefined,
  webhookId: string | undefined,
  send: () => Promise<T>,
  attributes?: Attributes,
): Promise<T> {
  if (parent === undefined) return send();
  const span = publishChild(parent, destination, webhookId, attributes);
  if (headers) injectSpan(span, headers);
  return endedAfter(span, send);
}

/** publishIn() under the active context (the API's resend, the publisher). */
export function publishSpan<T>(destination: string, headers: Record<string, unknown> | undefined, attributes: Attributes, send: () => Promise<T>): Promise<T> {
  if (!tracingActive()) return send();
  return publishIn(context.active(), destination, headers, undefined, send, attributes);
}
