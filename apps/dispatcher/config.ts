import { z } from 'zod';
import { deliveryLogFields, envFields, parseEnv, replicationFields, tracingFields } from '../../libs/config/index.js';
import { requireMerchantsFile } from '../../libs/config/env.js';

export const dispatcherEnvSchema = z.object({
  RABBITMQ_URL: envFields.rabbitmqUrl,
  TOPOLOGY_PREFIX: envFields.topologyPrefix,
  ...replicationFields,
  WEBHOOKS_DEV: envFields.boolean(false),
  MERCHANTS_FILE: envFields.filePath.optional(),
  MERCHANT_DIRECTORY: envFields.merchantDirectory,
  RETRY_SCHEDULE: envFields.retrySchedule,
  DELIVERY_TIMEOUT_MS: envFields.positiveInt(10_000, 300_000),
  DISPATCH_CONCURRENCY: envFields.positiveInt(64, 10_000),
  FAILED_RETENTION: envFields.streamMaxAge,
  /** A message this late out of its retry tier is put back in dispatch by the retry watch. */
  RETRY_OVERDUE_AFTER: envFields.durationMs('2m'),
  ALLOW_PRIVATE_TARGETS: envFields.boolean(false),
  // undici is about four times faster here; got stays selectable (same contract, same tests).
  HTTP_CLIENT: z.enum(['undici', 'got']).default('undici'),
  MAX_MESSAGE_BYTES: envFields.positiveInt(256 * 1024, 64 * 1024 * 1024),
  /** /metrics, /healthz and /readyz of the dispatcher (it has no other HTTP port); 0 picks a free port. */
  METRICS_PORT: z
    .string()
    .default('9464')
    .refine((v) => /^\d+$/.test(v) && Number(v) <= 65_535, 'must be a port number from 0 to 65535')
    .transform(Number),
  /** How long a stop (SIGTERM) may take, draining deliveries in flight included; the process exits by then whatever the broker does. */
  SHUTDOWN_TIMEOUT: envFields.durationMs('30s'),
  /** The delivery log: on, the dispatcher declares <prefix>.deliveries and keeps the first bytes of each answer. */
  DELIVERY_LOG: deliveryLogFields.DELIVERY_LOG,
  DELIVERY_LOG_RESPONSE_BYTES: deliveryLogFields.DELIVERY_LOG_RESPONSE_BYTES,
  LOG_LEVEL: envFields.logLevel,
  /** The standard OpenTelemetry variables; tracing is off without an OTLP endpoint. */
  ...tracingFields,
}).superRefine(requireMerchantsFile);

export type DispatcherConfig = z.infer<typeof dispatcherEnvSchema>;

export function loadDispatcherConfig(env: Record<string, string | undefined>): DispatcherConfig {
  return parseEnv(dispatcherEnvSchema, env);
}
