import { z } from 'zod';
import { deliveryLogFields, envFields, merchantStoreFields, parseEnv, replicationFields, requireMerchantStore, SHUTDOWN_TIMEOUT_MAX, tracingFields } from '../../libs/config/index.js';
import { WEBHOOK_SECRET } from '../../libs/merchants/schema.js';
import { MAX_RECORDED_BODY_BYTES } from '../../libs/delivery-log/index.js';

export const dispatcherEnvSchema = z.object({
  RABBITMQ_URL: envFields.rabbitmqUrl,
  TOPOLOGY_PREFIX: envFields.topologyPrefix,
  ...replicationFields,
  WEBHOOKS_DEV: envFields.boolean(false),
  ...merchantStoreFields,
  /** Where merchants live: the dispatcher reads them, and writes the failing clock and auto-disable. */
  DATABASE_URL: deliveryLogFields.DATABASE_URL,
  RETRY_SCHEDULE: envFields.retrySchedule,
  DELIVERY_TIMEOUT_MS: envFields.positiveInt(10_000, 300_000),
  DISPATCH_CONCURRENCY: envFields.positiveInt(64, 10_000),
  FAILED_RETENTION: envFields.streamMaxAge,
  /** How long a wait handed back to dispatch may take to come to its attempt before its row hands it on again (at least twice DELIVERY_TIMEOUT_MS). */
  WAIT_LEASE: envFields.durationMs('1m'),
  ALLOW_PRIVATE_TARGETS: envFields.boolean(false),
  /** At most what a delivery record can carry in a RabbitMQ 4 message (MAX_RECORDED_BODY_BYTES). */
  MAX_MESSAGE_BYTES: envFields.positiveInt(256 * 1024, MAX_RECORDED_BODY_BYTES),
  /** /metrics, /healthz and /readyz of the dispatcher (it has no other HTTP port); 0 picks a free port. */
  METRICS_PORT: z.string().default('9464')
    .refine((v) => /^\d+$/.test(v) && Number(v) <= 65_535, 'must be a port number from 0 to 65535').transform(Number),
  /** How long a stop (SIGTERM) may take, draining deliveries in flight included; the process exits by then whatever the broker does. */
  SHUTDOWN_TIMEOUT: envFields.durationMs('30s', SHUTDOWN_TIMEOUT_MAX),
  DELIVERY_LOG: deliveryLogFields.DELIVERY_LOG,
  DELIVERY_LOG_RESPONSE_BYTES: deliveryLogFields.DELIVERY_LOG_RESPONSE_BYTES,
  /** Auto-disable: an endpoint whose every attempt has failed this long is turned off. `0`: never. */
  ENDPOINT_DISABLE_AFTER: envFields.durationOrNeverMs('5d'),
  /** Per endpoint, at most one operational event of a kind per this; later ones fold into the next one's count. */
  OPERATIONAL_EVENT_INTERVAL: envFields.durationMs('1h'),
  /** Optional: the operational events also POSTed here as Standard Webhooks, signed with OPERATIONAL_WEBHOOK_SECRET. */
  OPERATIONAL_WEBHOOK_URL: z.url({ protocol: /^https?$/, error: 'must be an http(s) URL' }).optional(),
  OPERATIONAL_WEBHOOK_SECRET: z.string().regex(WEBHOOK_SECRET, 'must be whsec_ followed by base64 (a Standard Webhooks secret)').optional(),
  /** Idempotent intake: an upstream message whose key was seen this long ago or less is not delivered again. `0`: off. */
  INTAKE_DEDUPE_WINDOW: envFields.durationOrNeverMs('24h'),
  LOG_LEVEL: envFields.logLevel,
  ...tracingFields,
})
  .superRefine(requireMerchantStore)
  .superRefine((env, ctx) => {
    if (env.OPERATIONAL_WEBHOOK_URL && !env.OPERATIONAL_WEBHOOK_SECRET) {
      ctx.addIssue({ code: 'custom', path: ['OPERATIONAL_WEBHOOK_SECRET'], message: 'is required when OPERATIONAL_WEBHOOK_URL is set' });
    }
  });

export type DispatcherConfig = z.infer<typeof dispatcherEnvSchema>;

export function loadDispatcherConfig(env: Record<string, string | undefined>): DispatcherConfig {
  return parseEnv(dispatcherEnvSchema, env);
}
