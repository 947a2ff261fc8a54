import { type Attributes, type Context, context, ROOT_CONTEXT, type Span, SpanKind, trace } from '@opentelemetry/api';
import { ATTR, MESSAGING_SYSTEM } from './attributes.js';
import { contextFromHeaders, injectInto } from './carrier.js';
import { markFailed } from './spans.js';
import { tracer, tracingActive } from './state.js';

/**
 * SDK spans whose parent is passed by hand rather than through the active context: the
 * dispatcher's delivery, its HTTP attempt, its record and its moves. Entering a context per
 * delivery (context.with) would cost an AsyncLocalStorage frame on every promise of the walk.
 * Attributes are set only on a recorded span: an unsampled one (a tenth sampled, an upstream's
 * `-00`) costs no attribute checks, and still has ids, so the traceparent handed on says so.
 */
function startIn(parent: Context, name: string, kind: SpanKind, attributes: Attributes | undefined): Span {
  const span = tracer().startSpan(name, { kind }, parent);
  if (attributes !== undefined && span.isRecording()) span.setAttributes(attributes);
  return span;
}

/**
 * A span continuing the trace a message's headers carry (traceparent and tracestate, as a string
 * or, from pika or rabbitmq-c, bytes), or starting one; undefined while tracing is off.
 */
export function spanFromHeaders(name: string, kind: SpanKind, headers: Record<string, unknown> | undefined, attributes?: Attributes): Span | undefined {
  if (!tracingActive()) return undefined;
  return startIn(contextFromHeaders(headers, ROOT_CONTEXT), name, kind, attributes);
}

/** A span under `parent`; `attributes` are kept only if it is recorded (pass an object made once where it can be). */
export function childSpan(parent: Span, name: string, kind: SpanKind, attributes?: Attributes): Span {
  return startIn(trace.setSpan(ROOT_CONTEXT, parent), name, kind, attributes);
}

/** Writes the span's context into AMQP or HTTP headers, so what they carry continues its trace. */
export function injectSpan(span: Span, headers: Record<string, unknown>): void {
  injectInto(headers, trace.setSpan(ROOT_CONTEXT, span));
}

const NO_FIELDS = {};

/** The ids a log line about the span's work carries (none without a span). */
export function spanLogFields(span: Span | undefined): { trace_id?: string; span_id?: string } {
  if (span === undefined) return NO_FIELDS;
  const { traceId, spanId } = span.spanContext();
  return { trace_id: traceId, span_id: spanId };
}

/**
 * A publish span's name and constant attributes by operation and destination, made once: the
 * topology's queue names are the same few strings every time.
 */
const publishNames = new Map<string, { name: string; attributes: Attributes }>();
function publishNamed(operation: string, destination: string): { name: string; attributes: Attributes } {
  const key = `${operation} ${destination}`;
  let named = publishNames.get(key);
  if (named === undefined) {
    named = {
      name: key,
      attributes: {
        [ATTR.messagingSystem]: MESSAGING_SYSTEM,
        [ATTR.messagingOperationType]: 'send',
        [ATTR.messagingOperationName]: 'publish',
        [ATTR.messagingDestination]: destination,
      },
    };
    // A handful in practice; the bound only guards against a bug.
    if (publishNames.size < 1_000) publishNames.set(key, named);
  }
  return named;
}

/** The producer span of a publish (`<operation> <destination>`) in `parent`, for a caller that ends it itself. */
export function publishChild(parent: Span | Context, destination: string, webhookId?: string, operation = 'publish', attributes?: Attributes): Span {
  const named = publishNamed(operation, destination);
  const span = startIn('spanContext' in parent ? trace.setSpan(ROOT_CONTEXT, parent) : parent, named.name, SpanKind.PRODUCER, named.attributes);
  if (span.isRecording()) {
    if (webhookId !== undefined) span.setAttribute(ATTR.webhookId, webhookId);
    if (attributes) span.setAttributes(attributes);
  }
  return span;
}

/**
 * A publish to RabbitMQ inside `parent` as a producer span, its context written into `headers`
 * so that whoever consumes the copy continues this trace. Without a parent (tracing off) it is
 * only `send()`. Not an async function: on the dispatcher's path each delivery would pay for its
 * frame and promise.
 */
export function publishIn<T>(
  parent: Span | Context | undefined,
  destination: string,
  headers: Record<string, unknown> | undefined,
  webhookId: string | undefined,
  send: () => Promise<T>,
  operation = 'publish',
  attributes?: Attributes,
): Promise<T> {
  if (parent === undefined) return send();
  const span = publishChild(parent, destination, webhookId, operation, attributes);
  if (headers) injectSpan(span, headers);
  let sending: Promise<T>;
  try {
    sending = send();
  } catch (err) {
    markFailed(span, err);
    span.end();
    return Promise.reject(err);
  }
  return sending.then(
    (value) => {
      span.end();
      return value;
    },
    (err: unknown) => {
      markFailed(span, err);
      span.end();
      throw err;
    },
  );
}

/**
 * A publish to RabbitMQ as a producer span (`<operation> <destination>`) under the active
 * context, its context written into the message's headers so that whoever consumes the copy
 * continues this trace (`operation` names what the publish is for: a claim, a resolution). With
 * tracing off it is only `send()`: the headers keep whatever traceparent they carried.
 */
export function publishSpan<T>(
  destination: string,
  headers: Record<string, unknown> | undefined,
  attributes: Attributes,
  send: () => Promise<T>,
  operation = 'publish',
): Promise<T> {
  if (!tracingActive()) return send();
  return publishIn(context.active(), destination, headers, undefined, send, operation, attributes);
}
