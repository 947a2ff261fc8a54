import { z } from 'zod';
import { envFields, refuse } from './env.js';
import { MAX_TIMER_MS } from '../runtime/timers.js';

// The standard OpenTelemetry variables (DESIGN.md "Tracing"); the SDK's exporter reads OTEL_EXPORTER_OTLP_HEADERS itself.
const SAMPLERS = ['always_on', 'always_off', 'traceidratio', 'parentbased_always_on', 'parentbased_always_off', 'parentbased_traceidratio'] as const;
const PROTOCOLS = ['http/protobuf', 'http/json'] as const;

const httpUrl = z
  .string()
  .refine((v) => /^https?:\/\/\S+$/.test(v) && URL.canParse(v), 'must be an http:// or https:// URL, e.g. http://127.0.0.1:4318');

const protocol = z.string().transform((text, ctx) => {
  const value = text.trim();
  if ((PROTOCOLS as readonly string[]).includes(value)) return value as (typeof PROTOCOLS)[number];
  return refuse(ctx, `"${text}" is not supported: use http/protobuf (the default) or http/json`);
});

const count = (fallback: number, max = Number.MAX_SAFE_INTEGER) =>
  z
    .string()
    .optional()
    .refine((v) => v === undefined || /^\s*[1-9]\d*\s*$/.test(v), 'must be a whole number above 0')
    .refine((v) => v === undefined || Number(v) <= max, `must be at most ${max}`)
    .transform((v) => (v === undefined ? fallback : Number(v)));

export const tracingFields = {
  // The shared parser: a typo ("ture") stops start-up.
  OTEL_SDK_DISABLED: envFields.boolean(false),
  OTEL_TRACES_EXPORTER: z.enum(['otlp', 'none'], { error: 'must be otlp or none' }).optional(),
  OTEL_EXPORTER_OTLP_ENDPOINT: httpUrl.optional(),
  OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: httpUrl.optional(),
  OTEL_EXPORTER_OTLP_PROTOCOL: protocol.optional(),
  OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: protocol.optional(),
  OTEL_SERVICE_NAME: z.string().max(200).optional(),
  OTEL_TRACES_SAMPLER: z.enum(SAMPLERS, { error: `must be one of ${SAMPLERS.join(', ')}` }).optional(),
  OTEL_TRACES_SAMPLER_ARG: z
    .string()
    .optional()
    .refine((v) => v === undefined || (/^\s*(0|1|0?\.\d+|1\.0*)\s*$/.test(v) && Number(v) >= 0 && Number(v) <= 1), 'must be a ratio from 0 to 1'),
  // Bounded, so that a collector down does not grow the heap (the rest are dropped and counted).
  OTEL_BSP_MAX_QUEUE_SIZE: count(16_384),
  OTEL_BSP_MAX_EXPORT_BATCH_SIZE: count(2_048),
  // Milliseconds, each a timer's: past MAX_TIMER_MS it would fire at once.
  OTEL_BSP_SCHEDULE_DELAY: count(500, MAX_TIMER_MS),
  OTEL_BSP_EXPORT_TIMEOUT: count(30_000, MAX_TIMER_MS),
  OTEL_RESOURCE_ATTRIBUTES: z
    .string()
    .optional()
    .transform((text, ctx) => {
      if (text === undefined) return {};
      const attributes: Record<string, string> = {};
      for (const pair of text.split(',').filter((each) => each.trim() !== '')) {
        const at = pair.indexOf('=');
        const key = pair.slice(0, Math.max(at, 0)).trim();
        if (key === '') return refuse(ctx, 'must be key=value pairs separated by commas, e.g. deployment.environment=prod');
        attributes[key] = decoded(pair.slice(at + 1).trim());
      }
      return attributes;
    }),
};

function decoded(text: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    return '';
  }
}

export type TracingConfig = z.infer<z.ZodObject<typeof tracingFields>>;

/** What libs/tracing needs to start the SDK. `exportTimeoutMs`: how long one export may take (unset, the SDK's 10 s); tests shorten it. */
export type TracingSettings = NonNullable<ReturnType<typeof tracingSettingsOf>> & { exportTimeoutMs?: number };

/** The tracing settings of a program, or undefined when no OTLP endpoint is given (tracing off). */
export function tracingSettingsOf(config: TracingConfig, defaultServiceName: string) {
  if (config.OTEL_SDK_DISABLED || config.OTEL_TRACES_EXPORTER === 'none') return undefined;
  const url =
    config.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT ??
    (config.OTEL_EXPORTER_OTLP_ENDPOINT ? `${config.OTEL_EXPORTER_OTLP_ENDPOINT.replace(/\/+$/, '')}/v1/traces` : undefined);
  if (url === undefined) return undefined;
  const { 'service.name': fromResource, ...resourceAttributes } = config.OTEL_RESOURCE_ATTRIBUTES;
  return {
    url,
    protocol: config.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL ?? config.OTEL_EXPORTER_OTLP_PROTOCOL ?? 'http/protobuf',
    serviceName: config.OTEL_SERVICE_NAME ?? fromResource ?? defaultServiceName,
    sampler: {
      name: config.OTEL_TRACES_SAMPLER ?? 'parentbased_always_on',
      ratio: config.OTEL_TRACES_SAMPLER_ARG === undefined ? 1 : Number(config.OTEL_TRACES_SAMPLER_ARG),
    },
    resourceAttributes,
    batch: {
      maxQueueSize: config.OTEL_BSP_MAX_QUEUE_SIZE,
      maxExportBatchSize: config.OTEL_BSP_MAX_EXPORT_BATCH_SIZE,
      scheduledDelayMillis: config.OTEL_BSP_SCHEDULE_DELAY,
      exportTimeoutMillis: config.OTEL_BSP_EXPORT_TIMEOUT,
    },
  };
}
