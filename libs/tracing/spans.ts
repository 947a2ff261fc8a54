import { type Attributes, type Context, context, INVALID_SPAN_CONTEXT } from '@opentelemetry/api';
import { isSpanContextValid, propagation, ROOT_CONTEXT, type Span, SpanKind, SpanStatusCode } from '@opentelemetry/api';
import { type TextMapGetter, trace, TraceFlags, type Tracer } from '@opentelemetry/api';
import { BoundedMap } from '../runtime/bounded-map.js';
import { ATTR, MESSAGING_SYSTEM } from './attributes.js';

const NOT_RECORDING = trace.wrapSpanContext(INVALID_SPAN_CONTEXT);

/** Asked first, so that with tracing off a delivery creates no span, closure or context. */
let active = false;
let current: Tracer | undefined;

export function tracingActive(): boolean {
  return active;
}

export function setTracingActive(on: boolean): void {
  active = on;
  // A tracer belongs to the provider registered when it was taken: a restarted SDK (tests) needs a new one.
  current = undefined;
}

export function tracer(): Tracer {
  return (current ??= trace.getTracer('nucleus-webhooks', '0.1.0'));
}

/** W3C trace context in AMQP and HTTP headers; from pika or rabbitmq-c a header arrives as a Buffer. */
const headerGetter: TextMapGetter<Record<string, unknown> | undefined> = {
  keys: (carrier) => (carrier ? Object.keys(carrier) : []),
  get: (carrier, key) => {
    const value = carrier?.[key];
    return typeof value === 'string' ? value : Buffer.isBuffer(value) ? value.toString('utf8') : undefined;
  },
};

/** From the root: without a traceparent, never the active context (a span would link to itself). */
export function contextFromHeaders(headers: Record<string, unknown> | undefined): Context {
  return propagation.extract(ROOT_CONTEXT, headers, headerGetter);
}

/** Marks a span failed with the error's class, never its stack (messages may quote what a merchant answered). */
export function markFailed(span: Span, err: unknown, type?: string): void {
  const error = err as Error | undefined;
  span.setAttribute(ATTR.errorType, type ?? error?.name ?? 'Error');
  span.setStatus({ code: SpanStatusCode.ERROR, message: String(error?.message ?? err).slice(0, 200) });
}

/** Runs `work` in a new span under the active context; with tracing off, a non-recording one. */
export async function inSpan<T>(name: string, options: { kind?: SpanKind; attributes?: Attributes }, work: (span: Span) => Promise<T>): Promise<T> {
  if (!tracingActive()) return work(NOT_RECORDING);
  const parent = context.active();
  const span = tracer().startSpan(name, { kind: options.kind ?? SpanKind.INTERNAL, attributes: options.attributes }, parent);
  return endedAfter(span, () => context.with(trace.setSpan(parent, span), () => work(span)));
}

export async function endedAfter<T>(span: Span, work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (err) {
    markFailed(span, err);
    throw err;
  } finally {
    span.end();
  }
}

/** Links the active span to the trace a message's headers carry (a failure entry's webhook), if any. */
export function linkActiveSpanTo(headers: Record<string, unknown> | undefined, attributes?: Attributes): void {
  if (!tracingActive()) return;
  const spanContext = trace.getSpanContext(contextFromHeaders(headers));
  if (spanContext && isSpanContextValid(spanContext)) trace.getActiveSpan()?.addLink({ context: spanContext, attributes });
}

export function activeIds(): { trace_id: string; span_id: string } | undefined {
  const spanContext = trace.getActiveSpan()?.spanContext();
  if (!spanContext || !isSpanContextValid(spanContext)) return undefined;
  return { trace_id: spanContext.traceId, span_id: spanContext.spanId };
}

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
const publishAttributes = new BoundedMap<string, Attributes>(1_000);

/** The producer span of a publish to `destination` in `parent`, for a caller that ends it itself. */
export function publishChild(parent: Span | Context, destination: string, webhookId?: string, attributes?: Attributes): Span {
  const parentSpan = 'spanContext' in parent ? parent : trace.getSpan(parent);
  if (unsampled(parentSpan)) return parentSpan;
  let constants = publishAttributes.get(destination);
  if (constants === undefined) {
    constants = { [ATTR.messagingSystem]: MESSAGING_SYSTEM, [ATTR.messagingOperationType]: 'send', [ATTR.messagingOperationName]: 'publish', [ATTR.messagingDestination]: destination };
    publishAttributes.set(destination, constants);
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

export { SpanKind };
