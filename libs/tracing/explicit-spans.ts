import { SpanKind, SpanStatusCode } from '@opentelemetry/api';
import { ATTR, MESSAGING_SYSTEM } from './attributes.js';
import type { SpanChannel } from './span-channel.js';
import { ATTR_CODE, HAS_IS_REMOTE, IS_REMOTE, keyCode, type SpanAttributes, type SpanShape, type TraceWords } from './span-records.js';
import { explicitTracer } from './state.js';

/**
 * What explicit spans need from the SDK started in setup.ts: the configured sampler's decision,
 * its traceparent and tracestate parsing, and the channel to the export worker.
 */
export interface ExplicitTracer {
  readonly channel: SpanChannel;
  /** The configured sampler's decision for a span with no local parent (a root, or under a remote parent). */
  sample(traceId: string, parent: { sampled: boolean } | undefined): boolean;
  /** A traceparent header as the W3C propagator reads it, or null when it is not a valid one. */
  parseTraceparent(header: string): { traceId: string; spanId: string; traceFlags: number } | null;
  /** A tracestate header as the W3C propagator keeps it (invalid members dropped). */
  traceState(header: string): string;
}

const ORIGIN = performance.timeOrigin;

/**
 * Ids as the SDK's RandomIdGenerator makes them (Math.random, never all zeros), but kept as
 * 32-bit words, signed: written as they are, turned into hex only when a header or a log line
 * asks (a delivery's HTTP attempt; its other spans seldom). Signed, because a word above 2³¹ kept
 * in a field would be a heap number, allocated anew for every span.
 */
const random32 = (): number => (Math.random() * 0x1_0000_0000) | 0;
/** Where ids are turned into hex and back: Buffer's hex is native, a number's toString(16) several times slower. */
const scratch = Buffer.alloc(16);

function hex64(high: number, low: number): string {
  scratch.writeInt32BE(high, 0);
  scratch.writeInt32BE(low, 4);
  return scratch.toString('hex', 0, 8);
}

/** A new trace: its id's words, and its hex. */
function newTrace(): Trace {
  const w0 = random32();
  const w1 = random32();
  const w2 = random32();
  const w3 = random32() || 1;
  scratch.writeInt32BE(w0, 0);
  scratch.writeInt32BE(w1, 4);
  scratch.writeInt32BE(w2, 8);
  scratch.writeInt32BE(w3, 12);
  return { id: scratch.toString('hex', 0, 16), state: '', w0, w1, w2, w3 };
}

/** A trace continued from a traceparent whose ids the W3C propagator has checked: 32 and 16 hex digits. */
function remoteTrace(traceId: string, state: string): Trace {
  scratch.write(traceId, 0, 16, 'hex');
  return { id: traceId, state, w0: scratch.readInt32BE(0), w1: scratch.readInt32BE(4), w2: scratch.readInt32BE(8), w3: scratch.readInt32BE(12) };
}

type Constants = () => SpanAttributes;

/**
 * What the spans of one trace made here share: its id, in hex as headers and log lines carry it
 * and as the words its spans are written with (TraceWords), and its trace state.
 */
interface Trace extends TraceWords {
  readonly id: string;
  readonly state: string;
}

/** In a span's attributes, where a key would be: what follows is encoded attributes. */
const ENCODED = -1;

/**
 * A span whose context is passed by hand instead of through the active context: the
 * dispatcher's delivery, its HTTP attempt, its record and its moves. The SDK's spans cost about
 * 4 µs each and its AsyncLocalStorage context a hook on every promise of the process; these
 * cost well under a microsecond, write themselves as the OTLP/protobuf Span they are sent as when
 * they end, and leave the sending to the export worker. Sampling and header parsing are the
 * SDK's (ExplicitTracer). An unsampled span still has ids, so the traceparent handed on says
 * "not sampled", and records nothing.
 */
export class ExplicitSpan {
  private attributes: unknown[] | undefined;
  /** Read only when the span is written: an unsampled span costs no clock read (nor a heap number). */
  private readonly startMs: number;
  private statusCode: number = SpanStatusCode.UNSET;
  private statusMessage = '';
  private ended = false;
  private readonly high = random32();
  private readonly low = random32() || 1;
  private hex: string | undefined;

  constructor(
    private readonly tracer: ExplicitTracer,
    /** Its name, kind and constant attributes, encoded once (span-records.ts). */
    private readonly shape: SpanShape,
    private readonly trace: Trace,
    /** The parent's span id as two numbers; zeros for a root. */
    private readonly parentHigh: number,
    private readonly parentLow: number,
    readonly sampled: boolean,
    private readonly remoteParent: boolean,
  ) {
    this.startMs = sampled ? performance.now() : 0;
  }

  get traceId(): string {
    return this.trace.id;
  }

  get spanId(): string {
    return (this.hex ??= hex64(this.high, this.low));
  }

  get name(): string {
    return this.shape.name;
  }

  /**
   * An attribute, kept only when the span is sampled (values are strings, numbers or booleans).
   * Its key by name, or as its ATTR_CODE where a delivery's spans set it.
   */
  set(key: string | number, value: string | number | boolean): this {
    if (this.sampled) (this.attributes ??= []).push(typeof key === 'number' ? key : keyCode(key), value);
    return this;
  }

  /** Attributes encoded once by encodeAttributes() (those of an endpoint), kept only when the span is sampled. */
  setEncoded(attributes: Uint8Array): this {
    if (this.sampled) (this.attributes ??= []).push(ENCODED, attributes);
    return this;
  }

  /** Marks the span failed (status ERROR) with a short message, never a stack. */
  error(message?: string): this {
    this.statusCode = SpanStatusCode.ERROR;
    this.statusMessage = message === undefined ? '' : message.slice(0, 200);
    return this;
  }

  /** error(), with the error's class as error.type. */
  fail(type: string, message?: string): this {
    return this.set(ATTR_CODE.errorType, type).error(message);
  }

  /** A span under this one; `constants` are the attributes every span of this name and kind has. */
  child(name: string, kind: SpanKind, constants?: Constants): ExplicitSpan {
    return new ExplicitSpan(this.tracer, this.tracer.channel.shape(name, kind, constants), this.trace, this.high, this.low, this.sampled, false);
  }

  get traceparent(): string {
    return `00-${this.traceId}-${this.spanId}-${this.sampled ? '01' : '00'}`;
  }

  /** Writes this span's context into AMQP or HTTP headers, so what they carry continues its trace. */
  inject(headers: Record<string, unknown>): void {
    headers.traceparent = this.traceparent;
    if (this.trace.state !== '') headers.tracestate = this.trace.state;
  }

  /** The ids a log line written inside this span carries. */
  get logFields(): { trace_id: string; span_id: string } {
    return { trace_id: this.traceId, span_id: this.spanId };
  }

  end(): void {
    if (!this.sampled || this.ended) return;
    this.ended = true;
    const { channel } = this.tracer;
    const w = channel.writer;
    const span = w.beginSpan();
    const trace = this.trace;
    w.ids(trace, this.high, this.low);
    w.traceState(trace.state);
    w.parent(this.parentHigh, this.parentLow);
    w.raw(this.shape.head);
    w.times(ORIGIN + this.startMs, ORIGIN + performance.now());
    w.raw(this.shape.constants);
    const attributes = this.attributes;
    if (attributes !== undefined) {
      for (let i = 0; i < attributes.length; i += 2) {
        const key = attributes[i] as string | number;
        if (key === ENCODED) w.raw(attributes[i + 1] as Uint8Array);
        else w.attribute(key, attributes[i + 1]);
      }
    }
    const remote = this.remoteParent && (this.parentHigh !== 0 || this.parentLow !== 0);
    w.statusAndFlags(this.statusCode, this.statusMessage, 1 | HAS_IS_REMOTE | (remote ? IS_REMOTE : 0));
    w.endSpan(span);
    channel.ended();
  }
}

const headerText = (value: unknown): string | undefined => (typeof value === 'string' ? value : Buffer.isBuffer(value) ? value.toString('utf8') : undefined);

/**
 * A span continuing the trace a message's headers carry (traceparent and tracestate, as a string
 * or, from pika or rabbitmq-c, bytes), or starting one; undefined while tracing is off.
 */
export function spanFromHeaders(name: string, kind: SpanKind, headers: Record<string, unknown> | undefined, constants?: Constants): ExplicitSpan | undefined {
  const tracer = explicitTracer();
  if (!tracer) return undefined;
  const shape = tracer.channel.shape(name, kind, constants);
  const traceparent = headerText(headers?.traceparent);
  const parent = traceparent === undefined ? null : tracer.parseTraceparent(traceparent);
  if (parent) {
    const sampled = tracer.sample(parent.traceId, { sampled: (parent.traceFlags & 1) === 1 });
    const traceState = headerText(headers?.tracestate);
    scratch.write(parent.spanId, 0, 8, 'hex');
    const high = scratch.readInt32BE(0);
    const low = scratch.readInt32BE(4);
    const trace = remoteTrace(parent.traceId, traceState ? tracer.traceState(traceState) : '');
    return new ExplicitSpan(tracer, shape, trace, high, low, sampled, true);
  }
  const trace = newTrace();
  return new ExplicitSpan(tracer, shape, trace, 0, 0, tracer.sample(trace.id, undefined), false);
}

/**
 * A publish to RabbitMQ inside `parent` as a producer span (`<operation> <destination>`), its
 * context written into `headers` so that whoever consumes the copy continues this trace: the
 * explicit counterpart of publishSpan. Without a parent (tracing off) it is only `send()`. Not an
 * async function: on the dispatcher's path each delivery would pay for its frame and promise.
 */
export function publishIn<T>(
  parent: ExplicitSpan | undefined,
  destination: string,
  headers: Record<string, unknown> | undefined,
  webhookId: string | undefined,
  send: () => Promise<T>,
  operation = 'publish',
): Promise<T> {
  if (!parent) return send();
  const span = publishChild(parent, destination, webhookId, operation);
  if (headers) span.inject(headers);
  let sending: Promise<T>;
  try {
    sending = send();
  } catch (err) {
    publishFailed(span, err);
    return Promise.reject(err);
  }
  return sending.then(
    (value) => {
      span.end();
      return value;
    },
    (err: unknown) => {
      publishFailed(span, err);
      throw err;
    },
  );
}

/** The producer span of a publish inside `parent`, for a caller that ends it itself: the explicit counterpart of publishSpan. */
export function publishChild(parent: ExplicitSpan, destination: string, webhookId?: string, operation = 'publish'): ExplicitSpan {
  const named = publishNamed(operation, destination);
  const span = parent.child(named.name, SpanKind.PRODUCER, named.constants);
  if (webhookId !== undefined) span.set(ATTR_CODE.webhookId, webhookId);
  return span;
}

/**
 * A publish span's name and constant attributes by operation and destination, made once: a
 * delivery's record would otherwise build the name, and hash it anew, every time. Destinations
 * are the topology's queue names, the same strings each time, so their hashes are kept.
 */
const publishNames = new Map<string, Map<string, { name: string; constants: Constants }>>();
function publishNamed(operation: string, destination: string): { name: string; constants: Constants } {
  let byDestination = publishNames.get(operation);
  if (byDestination === undefined) publishNames.set(operation, (byDestination = new Map()));
  let named = byDestination.get(destination);
  if (named === undefined) {
    named = {
      name: `${operation} ${destination}`,
      constants: () => ({
        [ATTR.messagingSystem]: MESSAGING_SYSTEM,
        [ATTR.messagingOperationType]: 'send',
        [ATTR.messagingOperationName]: 'publish',
        [ATTR.messagingDestination]: destination,
      }),
    };
    // A handful in practice; the bound only guards against a bug.
    if (byDestination.size < 1_000) byDestination.set(destination, named);
  }
  return named;
}

function publishFailed(span: ExplicitSpan, err: unknown): void {
  span.fail((err as Error)?.name ?? 'Error', String((err as Error)?.message ?? err)).end();
}
