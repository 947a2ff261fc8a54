import { ROOT_CONTEXT, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import { parseTraceParent, TraceState } from '@opentelemetry/core';
import { ProtobufTraceSerializer } from '@opentelemetry/otlp-transformer';
import { defaultResource, resourceFromAttributes } from '@opentelemetry/resources';
import { BasicTracerProvider, RandomIdGenerator, type ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { ChannelSpanProcessor } from '../../libs/tracing/channel-processor.js';
import { type ExplicitTracer, publishIn, spanFromHeaders } from '../../libs/tracing/explicit-spans.js';
import { encodeEnvelope, encodeTraceRequest } from '../../libs/tracing/otlp-protobuf.js';
import { readableSpan } from '../../libs/tracing/readable-span.js';
import type { SpanChannel } from '../../libs/tracing/span-channel.js';
import { readSpanRecords } from '../../libs/tracing/span-records.js';
import { setTracingActive } from '../../libs/tracing/state.js';
import { FakeSpanChannel } from '../support/fake-span-channel.js';

/**
 * The export worker's own OTLP/protobuf encoder against the SDK's serializer: the same spans
 * (explicit ones with shapes, trace state and failures, and an SDK span with links and numbers of
 * every kind), encoded both ways and decoded field by field, are the same request. Zero varints
 * are left out of the comparison: proto3 reads a missing one as 0, and the SDK writes them.
 */
type Field = [number, unknown];

/** Which length-delimited fields are messages, by message: the rest are strings or bytes. */
const MESSAGES: Record<string, Record<number, string>> = {
  request: { 1: 'resourceSpans' },
  resourceSpans: { 1: 'resource', 2: 'scopeSpans' },
  resource: { 1: 'keyValue' },
  scopeSpans: { 1: 'scope', 2: 'span' },
  scope: { 3: 'keyValue' },
  span: { 9: 'keyValue', 13: 'link', 15: 'status' },
  link: { 4: 'keyValue' },
  keyValue: { 2: 'anyValue' },
  anyValue: { 5: 'arrayValue' },
  arrayValue: { 1: 'anyValue' },
  status: {},
};
const BYTES: Record<string, number[]> = { span: [1, 2, 4], link: [1, 2] };

function decode(buf: Buffer, message: string): Field[] {
  const out: Field[] = [];
  let i = 0;
  const varint = (): bigint => {
    let value = 0n;
    let shift = 0n;
    for (;;) {
      const byte = buf[i++]!;
      value |= BigInt(byte & 0x7f) << shift;
      shift += 7n;
      if (byte < 0x80) return value;
    }
  };
  while (i < buf.length) {
    const key = Number(varint());
    const field = key >>> 3;
    const wire = key & 7;
    if (wire === 0) {
      const value = varint();
      if (value !== 0n) out.push([field, value]);
    } else if (wire === 1) {
      out.push([field, buf.readBigUInt64LE(i)]);
      i += 8;
    } else if (wire === 5) {
      out.push([field, buf.readUInt32LE(i)]);
      i += 4;
    } else if (wire === 2) {
      const length = Number(varint());
      const body = buf.subarray(i, i + length);
      i += length;
      const inner = MESSAGES[message]?.[field];
      out.push([field, inner ? decode(body, inner) : BYTES[message]?.includes(field) ? body.toString('hex') : body.toString('utf8')]);
    } else throw new Error(`wire type ${wire}`);
  }
  return out;
}

const ids = new RandomIdGenerator();

it("writes the request the SDK's serializer writes for the same spans", async () => {
  const channel = new FakeSpanChannel();
  const tracer: ExplicitTracer = {
    channel: channel as unknown as SpanChannel,
    sample: () => true,
    parseTraceparent: parseTraceParent,
    traceState: (header) => new TraceState(header).serialize(),
  };
  setTracingActive(true, tracer);
  try {
    const root = spanFromHeaders('process q.dispatch', SpanKind.CONSUMER, { traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01', tracestate: 'vendor=upstream' }, () => ({
      'messaging.system': 'rabbitmq',
      'messaging.destination.name': 'q.dispatch',
    }))!;
    root.set('webhook.id', 'msg_ünïcode_✓').set('webhook.attempt', 3).set('custom.flag', false);
    const post = root.child('POST', SpanKind.CLIENT, () => ({ 'http.request.method': 'POST' }));
    post.set('url.full', `https://merchant.example/${'long-path/'.repeat(20)}`).set('http.response.status_code', 503).fail('503', 'rejected '.repeat(30));
    post.end();
    await publishIn(root, 'q.deliveries', undefined, undefined, async () => {});
    root.end();
    // A root of its own, with no parent.
    spanFromHeaders('process q.dispatch', SpanKind.CONSUMER, undefined)!.end();

    const provider = new BasicTracerProvider({ spanProcessors: [new ChannelSpanProcessor(channel as unknown as SpanChannel)] });
    const remote = trace.setSpanContext(ROOT_CONTEXT, { traceId: ids.generateTraceId(), spanId: ids.generateSpanId(), traceFlags: 1, isRemote: true });
    const sdkSpan = provider.getTracer('t').startSpan(
      'resend',
      {
        kind: SpanKind.INTERNAL,
        attributes: { 'webhook.merchant_id': 'm_1', big: 2 ** 40, negative: -7, ratio: 0.25, many: ['a', 'b'] },
        links: [{ context: { traceId: ids.generateTraceId(), spanId: ids.generateSpanId(), traceFlags: 1 }, attributes: { 'webhook.id': 'msg_9' } }],
      },
      remote,
    );
    sdkSpan.setStatus({ code: SpanStatusCode.ERROR, message: 'claim refused' });
    sdkSpan.end();
    // Under 128 bytes: its length takes one byte of the two the encoder sets aside for a span's.
    provider.getTracer('t').startSpan('x').end();
  } finally {
    setTracingActive(false);
  }

  const resource = defaultResource().merge(resourceFromAttributes({ 'service.name': 'encoder-test', 'deployment.environment': 'test' }));
  const scope = { name: 'webhook-relay', version: '0.1.0' };
  const spans: ReadableSpan[] = [];
  readSpanRecords(channel.bytes(), (span) => spans.push(readableSpan(span, resource, scope)));
  expect(spans).toHaveLength(6);

  const ours = Buffer.from(encodeTraceRequest([channel.bytes()], encodeEnvelope({ resource: resource.attributes, scope })));
  const sdk = Buffer.from(ProtobufTraceSerializer.serializeRequest(spans)!);
  expect(decode(ours, 'request')).toEqual(decode(sdk, 'request'));
  // Not trivially equal: six spans, every field there.
  expect(JSON.stringify(decode(ours, 'request'), (_k, v: unknown) => (typeof v === 'bigint' ? String(v) : v))).toContain('msg_ünïcode_✓');
});
