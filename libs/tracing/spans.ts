import { type Attributes, type Context, context, INVALID_SPAN_CONTEXT, isSpanContextValid, type Link, type Span, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import { ATTR, MESSAGING_SYSTEM } from './attributes.js';
import { contextFromHeaders, injectInto } from './carrier.js';
import { tracer, tracingActive } from './state.js';

const NOT_RECORDING = trace.wrapSpanContext(INVALID_SPAN_CONTEXT);

/** Marks a span failed with the error's class, never its stack (messages may quote what a merchant answered). */
export function markFailed(span: Span, err: unknown, type?: string): void {
  const error = err as Error | undefined;
  span.setAttribute(ATTR.errorType, type ?? error?.name ?? 'Error');
  span.setStatus({ code: SpanStatusCode.ERROR, message: String(error?.message ?? err).slice(0, 200) });
}

/**
 * A span whose attributes are set only when it is recorded: the samplers used here decide without
 * them, and an unsampled span (a tenth sampled, an upstream's unsampled traceparent) then costs no
 * attribute checks.
 */
export function recordingSpan(name: string, kind: SpanKind, attributes: Attributes | undefined, parent: Context, links?: Link[]): Span {
  const span = tracer().startSpan(name, links ? { kind, links } : { kind }, parent);
  if (attributes && span.isRecording()) span.setAttributes(attributes);
  return span;
}

/**
 * Runs `work` in a new span, child of the active context (or `parent`), ended when it settles.
 * With tracing off it only calls `work` (with a non-recording span).
 */
export async function inSpan<T>(
  name: string,
  options: { kind?: SpanKind; attributes?: Attributes; links?: Link[]; parent?: Context },
  work: (span: Span) => Promise<T>,
): Promise<T> {
  if (!tracingActive()) return work(NOT_RECORDING);
  const parent = options.parent ?? context.active();
  const span = recordingSpan(name, options.kind ?? SpanKind.INTERNAL, options.attributes, parent, options.links);
  try {
    return await context.with(trace.setSpan(parent, span), () => work(span));
  } catch (err) {
    markFailed(span, err);
    throw err;
  } finally {
    span.end();
  }
}

/**
 * A publish to RabbitMQ as a producer span (`publish <destination>`), its context written into
 * the message's headers so that whoever consumes the copy continues this trace (`operation` names
 * what the publish is for: a claim, a resolution). With tracing off
 * it is only `send()`: the headers keep whatever traceparent they carried.
 */
export function publishSpan<T>(
  destination: string,
  headers: Record<string, unknown> | undefined,
  attributes: Attributes,
  send: () => Promise<T>,
  operation = 'publish',
): Promise<T> {
  if (!tracingActive()) return send();
  return inSpan(
    `${operation} ${destination}`,
    {
      kind: SpanKind.PRODUCER,
      attributes: {
        [ATTR.messagingSystem]: MESSAGING_SYSTEM,
        [ATTR.messagingOperationType]: 'send',
        [ATTR.messagingOperationName]: 'publish',
        [ATTR.messagingDestination]: destination,
        ...attributes,
      },
    },
    async () => {
      if (headers) injectInto(headers);
      return send();
    },
  );
}

/** A link to the trace a message's headers carry (a failure entry's webhook), or undefined when it carries none. */
export function linkFromHeaders(headers: Record<string, unknown> | undefined, attributes?: Attributes): Link | undefined {
  const spanContext = trace.getSpanContext(contextFromHeaders(headers));
  return spanContext && isSpanContextValid(spanContext) ? { context: spanContext, attributes } : undefined;
}

/** Adds that link to the active span, when tracing is on and the headers carry a trace. */
export function linkActiveSpanTo(headers: Record<string, unknown> | undefined, attributes?: Attributes): void {
  if (!tracingActive()) return;
  const link = linkFromHeaders(headers, attributes);
  if (link) trace.getActiveSpan()?.addLink(link);
}

/** The trace and span ids of the active span, for log lines; undefined outside a span. */
export function activeIds(): { trace_id: string; span_id: string } | undefined {
  const spanContext = trace.getActiveSpan()?.spanContext();
  if (!spanContext || !isSpanContextValid(spanContext)) return undefined;
  return { trace_id: spanContext.traceId, span_id: spanContext.spanId };
}

export { SpanKind, tracer };
