import { context, diag, DiagLogLevel, propagation, ROOT_CONTEXT, SpanKind, trace } from '@opentelemetry/api';
import type { Sampler } from '@opentelemetry/sdk-trace-base';
import type { TracingSettings } from '../config/tracing.js';
import type { Logger } from '../logger/index.js';
import { SCOPE, setTracingActive } from './state.js';

export interface Tracing {
  /** True when spans are exported (an endpoint was configured). */
  readonly active: boolean;
  /** Exports the spans buffered so far (a CLI before it exits, a test before it looks). */
  flush(): Promise<void>;
  /** Exports what is buffered (bounded by `timeoutMs`) and stops; safe twice. */
  shutdown(timeoutMs?: number): Promise<void>;
}

const OFF: Tracing = { active: false, flush: async () => {}, shutdown: async () => {} };

/**
 * Starts the OpenTelemetry SDK for this process when `settings` says where to export (see
 * tracingSettingsOf), and does nothing otherwise. The SDK and the exporter are imported here, and
 * only here, only then: with no OTEL variables no exporter module is even loaded, and the rest of
 * the code sees the API package's no-op tracer. Spans are encoded and exported on a worker
 * thread (export-worker.ts) whose queue is bounded, so an unreachable collector drops spans
 * instead of slowing deliveries, and the encoding costs the program's thread nothing.
 */
export async function startTracing(settings: TracingSettings | undefined, logger?: Logger): Promise<Tracing> {
  if (!settings) return OFF;
  const [sdk, resources, core, { SpanChannel }, { ChannelSpanProcessor }] = await Promise.all([
    import('@opentelemetry/sdk-trace-node'),
    import('@opentelemetry/resources'),
    import('@opentelemetry/core'),
    import('./span-channel.js'),
    import('./channel-processor.js'),
  ]);
  if (logger) {
    // The SDK's own complaints on this thread as warnings of ours (the worker forwards its own).
    diag.setLogger(
      {
        error: (message) => logger.warn('tracing: exporter error', { detail: message.slice(0, 300) }),
        warn: (message) => logger.warn('tracing: exporter warning', { detail: message.slice(0, 300) }),
        info: () => {},
        debug: () => {},
        verbose: () => {},
      },
      DiagLogLevel.WARN,
    );
  }
  const ratio = new sdk.TraceIdRatioBasedSampler(settings.sampler.ratio);
  const root: Sampler = {
    always_on: new sdk.AlwaysOnSampler(),
    always_off: new sdk.AlwaysOffSampler(),
    traceidratio: ratio,
    parentbased_always_on: new sdk.AlwaysOnSampler(),
    parentbased_always_off: new sdk.AlwaysOffSampler(),
    parentbased_traceidratio: ratio,
  }[settings.sampler.name];
  const parentBased = settings.sampler.name.startsWith('parentbased_');
  const sampler = parentBased ? new sdk.ParentBasedSampler({ root }) : root;
  // The exporter, its queue and the encoding run on a worker thread (export-worker.ts).
  const channel = new SpanChannel(
    {
      url: settings.url,
      protocol: settings.protocol,
      serviceName: settings.serviceName,
      resourceAttributes: settings.resourceAttributes,
      exportTimeoutMs: settings.exportTimeoutMs,
      scope: { ...SCOPE },
    },
    logger,
  );
  const provider = new sdk.NodeTracerProvider({
    resource: resources.defaultResource().merge(
      resources.resourceFromAttributes({ ...settings.resourceAttributes, 'service.name': settings.serviceName }),
    ),
    sampler,
    spanProcessors: [new ChannelSpanProcessor(channel)],
  });
  // The global tracer provider, an AsyncLocalStorage context manager and the W3C propagator.
  provider.register();
  // A local parent's decision is its children's; this decides the rest as the sampler above does
  // (ParentBasedSampler: a remote parent's sampled flag; otherwise the root sampler).
  // Always on and always off are answered without the call: it allocates its arguments and result on every delivery.
  const rootSampled =
    root instanceof sdk.AlwaysOnSampler
      ? () => true
      : root instanceof sdk.AlwaysOffSampler
        ? () => false
        : (traceId: string): boolean => root.shouldSample(ROOT_CONTEXT, traceId, '', SpanKind.INTERNAL, {}, []).decision === sdk.SamplingDecision.RECORD_AND_SAMPLED;
  setTracingActive(true, {
    channel,
    sample: (traceId, parent) => (parentBased && parent ? parent.sampled : rootSampled(traceId)),
    parseTraceparent: core.parseTraceParent,
    traceState: (header) => new core.TraceState(header).serialize(),
  });
  logger?.info('tracing on', { url: settings.url, protocol: settings.protocol, serviceName: settings.serviceName, sampler: settings.sampler.name });
  let stopping: Promise<void> | undefined;
  return {
    active: true,
    flush: async () => {
      await provider.forceFlush();
      await channel.flush();
    },
    shutdown(timeoutMs = 5_000) {
      stopping ??= (async () => {
        const startedAt = performance.now();
        setTracingActive(false);
        await provider.shutdown().catch(() => {});
        await channel.shutdown(Math.max(0, timeoutMs - (performance.now() - startedAt)));
        trace.disable();
        context.disable();
        propagation.disable();
        diag.disable();
      })();
      return stopping;
    },
  };
}

/** A running program whose stop() also exports the spans still buffered, once the program has stopped. */
export function stoppingTracing(program: { stop(): Promise<void>; fatal?: Promise<Error> }, tracing: Tracing): { stop(): Promise<void>; fatal?: Promise<Error> } {
  return {
    fatal: program.fatal,
    stop: async () => {
      try {
        await program.stop();
      } finally {
        await tracing.shutdown();
      }
    },
  };
}
