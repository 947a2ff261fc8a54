import { context, diag, type DiagLogger, DiagLogLevel, propagation, trace } from '@opentelemetry/api';
import type { Sampler } from '@opentelemetry/sdk-trace-base';
import type { TracingSettings } from '../config/tracing.js';
import type { Logger } from '../logger/index.js';
import type { Running } from '../runtime/run.js';
import { within } from '../runtime/timers.js';
import { safeUrl } from './attributes.js';
import { setTracingActive } from './spans.js';

export interface Tracing {
  flush(): Promise<void>;
  /** Exports what is buffered (bounded by `timeoutMs`) and stops; safe twice. */
  shutdown(timeoutMs?: number): Promise<void>;
}

const OFF: Tracing = { flush: async () => {}, shutdown: async () => {} };

/** Starts (and only then imports) the SDK; `activeContext: false`: no context manager, every parent passed by hand. */
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
  // An AsyncLocalStorage context manager, once entered, costs a hook on every promise.
  provider.register(options.activeContext === false ? { contextManager: null } : {});
  setTracingActive(true);
  // Not the collector's credentials.
  logger?.info('tracing on', { url: safeUrl(settings.url)?.full ?? 'not a URL', protocol: settings.protocol, serviceName: settings.serviceName, sampler: settings.sampler.name });
  let stopping: Promise<void> | undefined;
  return {
    flush: () => provider.forceFlush(),
    shutdown(timeoutMs = 5_000) {
      stopping ??= (async () => {
        setTracingActive(false);
        // An export hanging on a collector that never answers must not hold a program's stop.
        await within(timeoutMs, provider.shutdown().catch(() => {}));
        trace.disable();
        context.disable();
        propagation.disable();
        diag.disable();
      })();
      return stopping;
    },
  };
}

/** A program whose stop() then exports the spans still buffered, within what is left of `stopTimeoutMs`. */
export function stoppingTracing(program: Running, tracing: Tracing, stopTimeoutMs = Infinity): Running {
  return {
    fatal: program.fatal,
    stop: () => {
      const deadline = Date.now() + stopTimeoutMs;
      return program.stop().finally(() => tracing.shutdown(Math.min(5_000, Math.max(0, deadline - Date.now()))));
    },
  };
}

const DROPPED = /^Dropped (\d+) spans because maxQueueSize reached/;

/** The SDK's warnings and errors as log lines, at most one of a kind a minute; dropped spans summed. */
function droppedSpansReporter(logger: Logger): DiagLogger {
  const everyMs = 60_000;
  let dropped = 0;
  let droppedTimer: NodeJS.Timeout | undefined;
  const reportDropped = () => {
    droppedTimer = undefined;
    if (dropped === 0) return;
    logger.warn('tracing: spans dropped', { dropped, reason: 'the batch span processor queue was full: the collector is slow or down' });
    dropped = 0;
    droppedTimer = setTimeout(reportDropped, everyMs).unref();
  };
  const lastAt = new Map<string, number>();
  const say = (level: 'error' | 'warning') => (...args: unknown[]) => {
    // A component's logger (the exporter's) passes its name first and the warning after it.
    const message = args.map(String).join(' ');
    const found = DROPPED.exec(message);
    if (found) {
      dropped += Number(found[1]);
      if (droppedTimer === undefined) reportDropped();
      return;
    }
    const now = Date.now();
    if (now - (lastAt.get(level) ?? -Infinity) < everyMs) return;
    lastAt.set(level, now);
    logger.warn(`tracing: exporter ${level}`, { detail: message.slice(0, 300) });
  };
  return { error: say('error'), warn: say('warning'), info: () => {}, debug: () => {}, verbose: () => {} };
}
