import { ROOT_CONTEXT, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import { parseTraceParent, TraceState } from '@opentelemetry/core';
import { BasicTracerProvider, type ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { ChannelSpanProcessor } from '../../libs/tracing/channel-processor.js';
import { type ExplicitTracer, publishIn, spanFromHeaders } from '../../libs/tracing/explicit-spans.js';
import type { SpanChannel } from '../../libs/tracing/span-channel.js';
import { setTracingActive } from '../../libs/tracing/state.js';
import { FakeSpanChannel } from '../support/fake-span-channel.js';
import { attemptSpan, endAttempt } from '../../apps/dispatcher/stages/trace.js';
import { WebhookNetworkError } from '../../libs/http/index.js';

/**
 * The records a program's thread hands its export worker, written by explicit spans and by the
 * SDK's spans (ChannelSpanProcessor), read back as the worker reads them: every field survives,
 * a shape's constant attributes included, and what is usually empty costs nothing.
 */
let channel: FakeSpanChannel;

beforeEach(() => {
  channel = new FakeSpanChannel();
  const tracer: ExplicitTracer = {
    channel: channel as unknown as SpanChannel,
    sample: (_traceId, parent) => parent?.sampled ?? true,
    parseTraceparent: parseTraceParent,
    traceState: (header) => new TraceState(header).serialize(),
  };
  setTracingActive(true, tracer);
});

afterAll(() => setTracingActive(false));

describe('span records', () => {
  it('carry an explicit span and its children: ids, parent, remote flag, trace state, shape attributes, attributes, status', async () => {
    // Words with the top bit set and not: ids are kept as signed 32-bit words and written modulo 2³².
    const traceId = '4bf92f35f7b34da6a3ce929d0e0e4736';
    const upstream = 'e0f067aa8ba902b7';
    const before = Date.now();
    const root = spanFromHeaders('process q.dispatch', SpanKind.CONSUMER, { traceparent: Buffer.from(`00-${traceId}-${upstream}-01`), tracestate: 'vendor=upstream,bad key=1' }, () => ({
      'messaging.system': 'rabbitmq',
      'messaging.destination.name': 'q.dispatch',
    }))!;
    root.set('webhook.id', 'msg_1').set('webhook.attempt', 2).set('custom.flag', true);
    const post = root.child('POST', SpanKind.CLIENT, () => ({ 'http.request.method': 'POST' }));
    const headers: Record<string, unknown> = {};
    post.inject(headers);
    post.set('http.response.status_code', 503).fail('503', 'x'.repeat(300));
    post.end();
    post.end();
    await publishIn(root, 'q.deliveries', undefined, undefined, async () => {});
    root.error('failed: exhausted');
    root.end();

    expect(headers).toEqual({ traceparent: `00-${traceId}-${post.spanId}-01`, tracestate: 'vendor=upstream' });
    const [http, record, delivery] = channel.read();
    expect(delivery).toEqual({
      name: 'process q.dispatch',
      kind: SpanKind.CONSUMER,
      traceId,
      spanId: root.spanId,
      parentSpanId: upstream,
      flags: 1,
      remoteParent: true,
      traceState: 'vendor=upstream',
      startMs: expect.any(Number),
      endMs: expect.any(Number),
      startTime: [expect.any(Number), expect.any(Number)],
      endTime: [expect.any(Number), expect.any(Number)],
      statusCode: SpanStatusCode.ERROR,
      statusMessage: 'failed: exhausted',
      attributes: { 'messaging.system': 'rabbitmq', 'messaging.destination.name': 'q.dispatch', 'webhook.id': 'msg_1', 'webhook.attempt': 2, 'custom.flag': true },
      links: [],
    });
    expect(delivery!.startMs).toBeGreaterThanOrEqual(before - 1);
    expect(delivery!.endMs).toBeGreaterThanOrEqual(delivery!.startMs);
    expect(delivery!.endMs).toBeLessThanOrEqual(Date.now() + 1);
    expect(http).toMatchObject({
      name: 'POST',
      kind: SpanKind.CLIENT,
      traceId,
      parentSpanId: root.spanId,
      remoteParent: false,
      statusCode: SpanStatusCode.ERROR,
      statusMessage: 'x'.repeat(200),
      attributes: { 'http.request.method': 'POST', 'http.response.status_code': 503, 'error.type': '503' },
    });
    expect(record).toMatchObject({
      name: 'publish q.deliveries',
      kind: SpanKind.PRODUCER,
      parentSpanId: root.spanId,
      statusCode: SpanStatusCode.UNSET,
      statusMessage: '',
      attributes: { 'messaging.system': 'rabbitmq', 'messaging.operation.type': 'send', 'messaging.operation.name': 'publish', 'messaging.destination.name': 'q.deliveries' },
    });
    // Ended twice, recorded once; a shape is encoded once however many spans use it.
    expect(channel.read()).toHaveLength(3);
    expect(channel.shapes.size).toBe(3);
  });

  it("carry an HTTP attempt's outcome: its status, or the network error that stopped it", () => {
    const root = spanFromHeaders('process q', SpanKind.CONSUMER, undefined)!;
    const headers: Record<string, string> = {};
    const refused = attemptSpan(root, { url: 'https://merchant.example/hook?token=secret', body: '{}', timeoutMs: 1_000, headers });
    expect(headers.traceparent).toBe(refused.traceparent);
    endAttempt(refused, undefined, new WebhookNetworkError('ECONNREFUSED', 'connect ECONNREFUSED 10.0.0.1:443'));
    const answered = attemptSpan(root, { url: 'https://merchant.example/hook', body: '{}', timeoutMs: 1_000, headers: {} });
    endAttempt(answered, { status: 503, headers: {}, body: '' });
    const [first, second] = channel.read();
    expect(first).toMatchObject({
      name: 'POST',
      parentSpanId: root.spanId,
      statusCode: SpanStatusCode.ERROR,
      statusMessage: 'ECONNREFUSED: connect ECONNREFUSED 10.0.0.1:443',
      attributes: { 'http.request.method': 'POST', 'url.full': 'https://merchant.example/hook', 'server.address': 'merchant.example', 'error.type': 'ECONNREFUSED' },
    });
    expect(first!.attributes).not.toHaveProperty('http.response.status_code');
    expect(second).toMatchObject({ statusCode: SpanStatusCode.ERROR, attributes: { 'http.response.status_code': 503, 'error.type': '503' } });
  });

  it('start a trace of their own without a valid traceparent, and record nothing when not sampled', () => {
    const root = spanFromHeaders('process q', SpanKind.CONSUMER, { traceparent: '00-00000000000000000000000000000000-00f067aa0ba902b7-01' })!;
    expect(root.traceId).toMatch(/^[0-9a-f]{32}$/);
    expect(root.traceId).not.toBe('00000000000000000000000000000000');
    root.end();
    const unsampled = spanFromHeaders('process q', SpanKind.CONSUMER, { traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00' })!;
    const child = unsampled.child('POST', SpanKind.CLIENT);
    expect(child.traceparent).toBe(`00-4bf92f3577b34da6a3ce929d0e0e4736-${child.spanId}-00`);
    expect(child.spanId).toMatch(/^[0-9a-f]{16}$/);
    expect(child.spanId).not.toBe(unsampled.spanId);
    child.set('http.response.status_code', 200).end();
    unsampled.end();
    expect(channel.read().map((s) => [s.traceId, s.parentSpanId])).toEqual([[root.traceId, '']]);
  });

  it("carry the SDK's spans whole: links with their attributes, remote parent, trace state, status", () => {
    const processor = new ChannelSpanProcessor(channel as unknown as SpanChannel);
    const provider = new BasicTracerProvider({ spanProcessors: [processor] });
    const parent = trace.setSpanContext(ROOT_CONTEXT, {
      traceId: '4bf92f3577b34da6a3ce929d0e0e4736',
      spanId: '00f067aa0ba902b7',
      traceFlags: 1,
      isRemote: true,
      traceState: new TraceState('a=1'),
    });
    const linked = { traceId: 'aaaabbbbccccddddeeeeffff00001111', spanId: '1234567812345678', traceFlags: 1 };
    const span = provider.getTracer('t').startSpan('resend', { kind: SpanKind.INTERNAL, attributes: { 'webhook.merchant_id': 'm_1', n: 3 }, links: [{ context: linked, attributes: { 'webhook.id': 'msg_9' } }] }, parent);
    span.setStatus({ code: SpanStatusCode.ERROR, message: 'claim refused' });
    span.end();
    const readable = span as unknown as ReadableSpan;
    const [read] = channel.read();
    expect(read).toEqual({
      name: 'resend',
      kind: SpanKind.INTERNAL,
      traceId: '4bf92f3577b34da6a3ce929d0e0e4736',
      spanId: span.spanContext().spanId,
      parentSpanId: '00f067aa0ba902b7',
      flags: 1,
      remoteParent: true,
      traceState: 'a=1',
      startMs: readable.startTime[0] * 1000 + readable.startTime[1] / 1e6,
      endMs: readable.endTime[0] * 1000 + readable.endTime[1] / 1e6,
      // The SDK's times, to the nanosecond.
      startTime: readable.startTime,
      endTime: readable.endTime,
      statusCode: SpanStatusCode.ERROR,
      statusMessage: 'claim refused',
      attributes: { 'webhook.merchant_id': 'm_1', n: 3 },
      links: [{ traceId: linked.traceId, spanId: linked.spanId, attributes: { 'webhook.id': 'msg_9' } }],
    });
  });
});
