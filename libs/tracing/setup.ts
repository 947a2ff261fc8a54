import { context, diag, DiagLogLevel, propagation, trace } from '@opentelemetry/api';
import type { Sampler } from '@opentelemetry/sdk-trace-base';
import type { TracingSettings } from '../config/tracing.js';
import type { Logger } from '../logger/index.js';
import { droppedSpansReporter } from './dropped.js';
import { setTracingActive } from './spans.js';

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
 * Starts the OpenTelemetry SDK when `settings` say where to export, and does nothing otherwise:
 * the SDK and the exporter are imported only then, so with no OTEL variables the rest of the code
 * sees the API package's no-op tracer. The SDK's BatchSpanProcessor holds at most
 * `batch.maxQueueSize` spans: a collector down or slow drops spans, never slows a delivery.
 * `activeContext: false`: no context manager, for a program that passes every parent by hand.
 */
export async function startTracing(settings: TracingSettings | undefined, logger?: Logger, options: { activeContext?: boolean } = {}): Promise<Tracing> {
  if (!settings) return OFF;
  const [sdk, { resourceFromAttributes, defaultResource }, { OTLPTraceExporter }] = await Promise.all([
    import('@opentelemetry/sdk-trace-node'),
    import('@opentelemetry/resources'),
    settings.protocol === 'http/json' ? import('@opentelemetry/exporter-trace-otlp-http') : import('@opentelemetry/exporter-trace-otlp-proto'),
  ]);
  if (logger) diag.setLogger(droppedSpansReporter(logger), DiagLogLevel.WARN);
  // OTEL_TRACES_SAMPLER: parentbased_X keeps a parent's decision and decides roots as X does.
  const rootName = settings.sampler.name.replace(/^parentbased_/, '');
  const root: Sampler =
    rootName === 'always_on' ? new sdk.AlwaysOnSampler() : rootName === 'always_off' ? new sdk.AlwaysOffSampler() : new sdk.TraceIdRatioBasedSampler(settings.sampler.ratio);
  const exporter = new OTLPTraceExporter({ url: settings.url, ...(settings.exportTimeoutMs ? { timeoutMillis: settings.exportTimeoutMs } : {}) });
  const provider = new sdk.NodeTracerProvider({
    resource: defaultResource().merge(resourceFromAttributes({ ...settings.resourceAttributes, 'service.name': settings.serviceName })),
    sampler: rootName !== settings.sampler.name ? new sdk.ParentBasedSampler({ root }) : root,
    spanProcessors: [new sdk.BatchSpanProcessor(exporter, { ...settings.batch, exportTimeoutMillis: settings.exportTimeoutMs ?? settings.batch.exportTimeoutMillis })],
  });
  // The global tracer provider and the W3C propagator, and, unless the program passes every parent
  // by hand (the dispatcher), an AsyncLocalStorage context manager: once entered (the batch
  // processor enters one per export) it costs a hook on every promise of the process: a third of
  // the dispatcher's rate in the bench (BENCHMARKS.md section 14).
  provider.register(options.activeContext === false ? { contextManager: null } : {});
  setTracingActive(true);
  logger?.info('tracing on', { url: settings.url, protocol: settings.protocol, serviceName: settings.serviceName, sampler: settings.sampler.name });
  let stopping: Promise<void> | undefined;
  return {
    active: true,
    flush: () => provider.forceFlush(),
    shutdown(timeoutMs = 5_000) {
      stopping ??= (async () => {
        setTracingActive(false);
        // An export hanging on a collector that never answers must not hold a program's stop.
        await Promise.race([provider.shutdown().catch(() => {}), new Promise((resolve) => setTimeout(resolve, timeoutMs).unref())]);
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
