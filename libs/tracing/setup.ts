import { context, diag, DiagLogLevel, propagation, trace } from '@opentelemetry/api';
import type { TracingSettings } from '../config/tracing.js';
import type { Logger } from '../logger/index.js';
import { setTracingActive } from './state.js';

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
 * the code sees the API package's no-op tracer. Spans go through a batch processor, so an
 * unreachable collector drops spans instead of slowing deliveries.
 */
export async function startTracing(settings: TracingSettings | undefined, logger?: Logger): Promise<Tracing> {
  if (!settings) return OFF;
  const [sdk, resources, exporterModule] = await Promise.all([
    import('@opentelemetry/sdk-trace-node'),
    import('@opentelemetry/resources'),
    settings.protocol === 'http/json' ? import('@opentelemetry/exporter-trace-otlp-http') : import('@opentelemetry/exporter-trace-otlp-proto'),
  ]);
  if (logger) {
    // The SDK's own complaints (an export that failed) as warnings of ours, never more than that.
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
  const root = {
    always_on: new sdk.AlwaysOnSampler(),
    always_off: new sdk.AlwaysOffSampler(),
    traceidratio: ratio,
    parentbased_always_on: new sdk.AlwaysOnSampler(),
    parentbased_always_off: new sdk.AlwaysOffSampler(),
    parentbased_traceidratio: ratio,
  }[settings.sampler.name];
  const sampler = settings.sampler.name.startsWith('parentbased_') ? new sdk.ParentBasedSampler({ root }) : root;
  const exporter = new exporterModule.OTLPTraceExporter({ url: settings.url, ...(settings.exportTimeoutMs ? { timeoutMillis: settings.exportTimeoutMs } : {}) });
  const provider = new sdk.NodeTracerProvider({
    resource: resources.defaultResource().merge(
      resources.resourceFromAttributes({ ...settings.resourceAttributes, 'service.name': settings.serviceName }),
    ),
    sampler,
    spanProcessors: [new sdk.BatchSpanProcessor(exporter)],
  });
  // The global tracer provider, an AsyncLocalStorage context manager and the W3C propagator.
  provider.register();
  setTracingActive(true);
  logger?.info('tracing on', { url: settings.url, protocol: settings.protocol, serviceName: settings.serviceName, sampler: settings.sampler.name });
  let stopping: Promise<void> | undefined;
  return {
    active: true,
    flush: () => provider.forceFlush(),
    shutdown(timeoutMs = 5_000) {
      stopping ??= (async () => {
        let timer: NodeJS.Timeout | undefined;
        const late = new Promise<void>((resolve) => {
          timer = setTimeout(resolve, timeoutMs);
          timer.unref();
        });
        await Promise.race([provider.shutdown().catch(() => {}), late]);
        clearTimeout(timer);
        setTracingActive(false);
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
