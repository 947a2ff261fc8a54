import { SpanKind, SpanStatusCode } from '@opentelemetry/api';
import { ATTR, MESSAGING_SYSTEM } from './attributes.js';
import type { SpanChannel } from './span-channel.js';
import { BITS, keyCode, type SpanShape, STATUS_SHIFT } from './span-records.js';
import { explicitTracer } from './state.js';

/**
 * What explicit spans need from the SDK started in setup.ts: its id generator, the configured
 * sampler's decision, its traceparent and tracestate parsing, and the channel to the export worker.
 */
export interface ExplicitTracer {
  readonly channel: SpanChannel;
  spanId(): string;
  traceId(): string;
  /** The configured sampler's decision for a span with no local parent (a root, or under a remote parent). */
  sample(traceId: string, parent: { sampled: boolean } | undefined): boolean;
  /** A traceparent header as the W3C propagator reads it, or null when it is not a valid one. */
  parseTraceparent(header: string): { traceId: string; spanId: string; traceFlags: number } | null;
  /** A tracestate header as the W3C propagator keeps it (invalid members dropped). */
  traceState(header: string): string;
}

const ORIGIN = performance.timeOrigin;

type Constants = () => SpanShape['attributes'];

/**
 * A span whose context is passed by hand instead of through the active context: the
 * dispatcher's delivery, its HTTP attempt, its record and its moves. The SDK's spans cost about
 * 4 µs each and its AsyncLocalStorage context a hook on every promise of the process; these
 * cost well under a microsecond, list their fields when they end, and leave the encoding to the
 * export worker. Sampling, ids and header parsing are the SDK's (ExplicitTracer). An unsampled
 * span still has ids, so the traceparent handed on says "not sampled", and records nothing.
 */
export class ExplicitSpan {
  private attributes: unknown[] | undefined;
  private readonly startMs = performance.now();
  private statusCode: number = SpanStatusCode.UNSET;
  private statusMessage = '';
  private ended = false;

  constructor(
    private readonly tracer: ExplicitTracer,
    /** Its name, kind and constant attributes, sent to the worker once (span-records.ts). */
    private readonly shape: SpanShape,
    readonly traceId: string,
    readonly spanId: string,
    private readonly parentSpanId: string,
    readonly sampled: boolean,
    private readonly remoteParent: boolean,
    private readonly traceState: string,
  ) {}

  get name(): string {
    return this.shape.name;
  }

  /** An attribute, kept only when the span is sampled (values are strings, numbers or booleans). */
  set(key: string, value: string | number | boolean): this {
    if (this.sampled) (this.attributes ??= []).push(keyCode(key), value);
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
    return this.set(ATTR.errorType, type).error(message);
  }

  /** A span under this one; `constants` are the attributes every span of this name and kind has. */
  child(name: string, kind: SpanKind, constants?: Constants): ExplicitSpan {
    return new ExplicitSpan(this.tracer, this.tracer.channel.shape(name, kind, constants), this.traceId, this.tracer.spanId(), this.spanId, this.sampled, false, this.traceState);
  }

  get traceparent(): string {
    return `00-${this.traceId}-${this.spanId}-${this.sampled ? '01' : '00'}`;
  }

  /** Writes this span's context into AMQP or HTTP headers, so what they carry continues its trace. */
  inject(headers: Record<string, unknown>): void {
    headers.traceparent = this.traceparent;
    if (this.traceState !== '') headers.tracestate = this.traceState;
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
    const bits =
      1 |
      (this.remoteParent ? BITS.remoteParent : 0) |
      (this.traceState !== '' ? BITS.state : 0) |
      (this.statusMessage !== '' ? BITS.message : 0) |
      (this.statusCode << STATUS_SHIFT);
    w.u32(this.shape.id);
    w.id(this.traceId, 16);
    w.id(this.spanId, 8);
    w.id(this.parentSpanId, 8);
    w.u32(bits);
    w.f64(ORIGIN + this.startMs);
    w.f64(ORIGIN + performance.now());
    if (this.traceState !== '') w.string(this.traceState);
    if (this.statusMessage !== '') w.string(this.statusMessage);
    const attributes = this.attributes;
    if (attributes === undefined) w.u16(0);
    else {
      w.u16(attributes.length / 2);
      for (let i = 0; i < attributes.length; i += 2) {
        w.key(attributes[i] as string | number);
        w.value(attributes[i + 1]);
      }
    }
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
    return new ExplicitSpan(tracer, shape, parent.traceId, tracer.spanId(), parent.spanId, sampled, true, traceState ? tracer.traceState(traceState) : '');
  }
  const traceId = tracer.traceId();
  return new ExplicitSpan(tracer, shape, traceId, tracer.spanId(), '', tracer.sample(traceId, undefined), false, '');
}

/**
 * A publish to RabbitMQ inside `parent` as a producer span (`<operation> <destination>`), its
 * context written into `headers` so that whoever consumes the copy continues this trace: the
 * explicit counterpart of publishSpan. Without a parent (tracing off) it is only `send()`.
 */
export async function publishIn<T>(
  parent: ExplicitSpan | undefined,
  destination: string,
  headers: Record<string, unknown> | undefined,
  webhookId: string | undefined,
  send: () => Promise<T>,
  operation = 'publish',
): Promise<T> {
  if (!parent) return send();
  const span = parent.child(`${operation} ${destination}`, SpanKind.PRODUCER, () => ({
    [ATTR.messagingSystem]: MESSAGING_SYSTEM,
    [ATTR.messagingOperationType]: 'send',
    [ATTR.messagingOperationName]: 'publish',
    [ATTR.messagingDestination]: destination,
  }));
  if (webhookId !== undefined) span.set(ATTR.webhookId, webhookId);
  if (headers) span.inject(headers);
  try {
    return await send();
  } catch (err) {
    span.fail((err as Error)?.name ?? 'Error', String((err as Error)?.message ?? err));
    throw err;
  } finally {
    span.end();
  }
}
