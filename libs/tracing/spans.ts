import { type Attributes, type Context, context, INVALID_SPAN_CONTEXT, isSpanContextValid, propagation, ROOT_CONTEXT, type Span, SpanKind, SpanStatusCode, type TextMapGetter, trace, type Tracer } from '@opentelemetry/api';
import { ATTR } from './attributes.js';

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

export { SpanKind };
