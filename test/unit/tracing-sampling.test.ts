import { type Context, ROOT_CONTEXT, SpanKind, trace } from '@opentelemetry/api';
import { AlwaysOffSampler, AlwaysOnSampler, ParentBasedSampler, RandomIdGenerator, type Sampler, SamplingDecision, TraceIdRatioBasedSampler } from '@opentelemetry/sdk-trace-base';
import { childSpan, spanFromHeaders, startTracing } from '../../libs/tracing/index.js';
import { testTracingSettings } from '../support/otlp-receiver.js';

/**
 * Each OTEL_TRACES_SAMPLER gives the dispatcher's spans the SDK sampler it names: a span under an
 * upstream traceparent (sampled or not), its child, and a new root decide as that sampler does.
 * The SDK is started as the programs start it, exporting nowhere (no span here ends).
 */
const ids = new RandomIdGenerator();

const sdkSamplers: Record<string, (ratio: number) => Sampler> = {
  always_on: () => new AlwaysOnSampler(),
  always_off: () => new AlwaysOffSampler(),
  traceidratio: (ratio) => new TraceIdRatioBasedSampler(ratio),
  parentbased_always_on: () => new ParentBasedSampler({ root: new AlwaysOnSampler() }),
  parentbased_always_off: () => new ParentBasedSampler({ root: new AlwaysOffSampler() }),
  parentbased_traceidratio: (ratio) => new ParentBasedSampler({ root: new TraceIdRatioBasedSampler(ratio) }),
};

const sampled = (span: { spanContext(): { traceFlags: number } }) => (span.spanContext().traceFlags & 1) === 1;

describe.each(Object.keys(sdkSamplers))('spans sampled by %s', (name) => {
  const ratio = 0.3;
  let tracing: Awaited<ReturnType<typeof startTracing>>;

  beforeAll(async () => {
    tracing = await startTracing({ ...testTracingSettings('http://127.0.0.1:9/v1/traces', 'http/protobuf'), sampler: { name: name as 'always_on', ratio } });
  });

  afterAll(() => tracing.shutdown(1_000));

  it('decide as the SDK sampler does', () => {
    const sdk = sdkSamplers[name]!(ratio);
    const decide = (context: Context, traceId: string) => sdk.shouldSample(context, traceId, 'process q', SpanKind.CONSUMER, {}, []).decision === SamplingDecision.RECORD_AND_SAMPLED;
    const seen = new Set<boolean>();
    for (let i = 0; i < 300; i++) {
      const traceId = ids.generateTraceId();
      const spanId = ids.generateSpanId();
      const traceFlags = i % 2;
      const remote = trace.setSpanContext(ROOT_CONTEXT, { traceId, spanId, traceFlags, isRemote: true });
      const under = spanFromHeaders('process q', SpanKind.CONSUMER, { traceparent: `00-${traceId}-${spanId}-0${traceFlags}` })!;
      expect([traceFlags, sampled(under)]).toEqual([traceFlags, decide(remote, traceId)]);
      const child = childSpan(under, 'POST', SpanKind.CLIENT);
      expect(sampled(child)).toBe(sampled(under));
      // An unsampled delivery makes no child span: the attempt, moves and records cost nothing more.
      if (!sampled(under)) expect(child).toBe(under);
      const root = spanFromHeaders('process q', SpanKind.CONSUMER, {})!;
      expect(sampled(root)).toBe(decide(ROOT_CONTEXT, root.spanContext().traceId));
      seen.add(sampled(root));
    }
    // The ratio samplers were tried both ways.
    if (name.endsWith('traceidratio')) expect([...seen].sort()).toEqual([false, true]);
  });
});
