import { SpanKind } from '@opentelemetry/api';
import { parseTraceParent, TraceState } from '@opentelemetry/core';
import { type ExplicitTracer, spanFromHeaders } from '../../libs/tracing/explicit-spans.js';
import { SpanChannel } from '../../libs/tracing/span-channel.js';
import { setTracingActive } from '../../libs/tracing/state.js';
import { OtlpReceiver } from '../support/otlp-receiver.js';
import { waitFor } from '../support/wait.js';

/**
 * A program's spans through the real export worker to a real OTLP/HTTP receiver: the bytes the
 * program's thread writes cross to the worker whole (a span larger than the batch buffer, text
 * that is not ASCII), and the worker gathers them into few requests without being flushed.
 */
let receiver: OtlpReceiver;
let channel: SpanChannel;

beforeEach(async () => {
  receiver = await OtlpReceiver.start();
  channel = new SpanChannel({ url: receiver.url, protocol: 'http/json', serviceName: 'channel-test', resourceAttributes: {}, scope: { name: 'webhook-relay', version: '0.1.0' } });
  const tracer: ExplicitTracer = {
    channel,
    sample: () => true,
    parseTraceparent: parseTraceParent,
    traceState: (header) => new TraceState(header).serialize(),
  };
  setTracingActive(true, tracer);
});

afterEach(async () => {
  setTracingActive(false);
  await channel.shutdown(5_000);
  await receiver.close();
});

function spans(count: number, from = 0): void {
  for (let i = from; i < from + count; i++) spanFromHeaders('process q.dispatch', SpanKind.CONSUMER, undefined)!.set('webhook.id', `msg_${i}`).end();
}

it('gathers the batches of a burst into one request, sent without a flush', async () => {
  // 2,000 spans leave the program's thread as two batches (1,024 and 976).
  spans(2_000);
  await waitFor('2,000 spans exported', () => receiver.spans.length === 2_000, 5_000);
  expect(receiver.spansPerRequest).toEqual([2_000]);
  expect(new Set(receiver.spans.map((span) => span.attributes['webhook.id'])).size).toBe(2_000);
});

it('sends a backlog in a few requests of at most 8,192 spans', async () => {
  // Fifteen batches at once: the most the program hands over before the worker takes any is sixteen.
  spans(15_000);
  await waitFor('15,000 spans exported', () => receiver.spans.length === 15_000, 10_000);
  expect(receiver.spansPerRequest.length).toBeGreaterThanOrEqual(2);
  expect(receiver.spansPerRequest.length).toBeLessThanOrEqual(3);
  for (const count of receiver.spansPerRequest) expect(count).toBeLessThanOrEqual(8_192);
});

it('keeps a request of large spans under its byte bound, even with fewer spans than a request may hold', async () => {
  // About 1 KB each as protobuf: a batch of 1,024 is about 1 MB, two are past http/json's bound (1.5 MiB of protobuf).
  const text = 'x'.repeat(1_000);
  for (let i = 0; i < 3_000; i++) spanFromHeaders('process q.dispatch', SpanKind.CONSUMER, undefined)!.set('webhook.id', `msg_${i}`).set('custom.text', text).end();
  await waitFor('3,000 spans exported', () => receiver.spans.length === 3_000, 10_000);
  expect(receiver.spansPerRequest.length).toBeGreaterThanOrEqual(3);
  for (const count of receiver.spansPerRequest) expect(count).toBeLessThanOrEqual(1_024);
});

it('carries a span larger than the batch buffer and text that is not ASCII, byte for byte', async () => {
  const long = 'é✓'.repeat(120_000);
  spans(10);
  spanFromHeaders('process q.dispatch', SpanKind.CONSUMER, { traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' })!
    .set('webhook.id', 'msg_ünïcode')
    .set('custom.long', long)
    .error('refusé ✗')
    .end();
  spans(10, 10);
  await channel.flush();
  expect(receiver.spans).toHaveLength(21);
  const big = receiver.spans.find((span) => span.attributes['webhook.id'] === 'msg_ünïcode')!;
  expect(big).toMatchObject({ traceId: '4bf92f3577b34da6a3ce929d0e0e4736', parentSpanId: '00f067aa0ba902b7', status: { code: 2, message: 'refusé ✗' } });
  expect(big.attributes['custom.long']).toBe(long);
  expect(receiver.spans.map((span) => span.attributes['webhook.id'])).toEqual([...Array.from({ length: 10 }, (_, i) => `msg_${i}`), 'msg_ünïcode', ...Array.from({ length: 10 }, (_, i) => `msg_${10 + i}`)]);
});
