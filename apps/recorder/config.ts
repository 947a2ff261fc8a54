import { z } from 'zod';
import { deliveryLogFields, envFields, parseEnv, replicationFields, tracingFields } from '../../libs/config/index.js';

export const recorderEnvSchema = z
  .object({
    RABBITMQ_URL: envFields.rabbitmqUrl,
    TOPOLOGY_PREFIX: envFields.topologyPrefix,
    ...replicationFields,
    METRICS_PORT: envFields.port(),
    WEBHOOKS_DEV: envFields.boolean(false),
    ...deliveryLogFields,
    LOG_LEVEL: envFields.logLevel,
    /** The standard OpenTelemetry variables; tracing is off without an OTLP endpoint. */
    ...tracingFields,
  })
  .superRefine((env, ctx) => {
    // Not requireDatabase: its hint (WEBHOOKS_DEV=true for an embedded database) does not hold here.
    if (!env.DATABASE_URL) {
      // The embedded database belongs to the process that opens it: npm start runs the recorder itself.
      ctx.addIssue({ code: 'custom', path: ['DATABASE_URL'], message: 'is required to run the recorder on its own (npm start runs one with an embedded database)' });
    }
  });

export type RecorderConfig = z.infer<typeof recorderEnvSchema>;

export function loadRecorderConfig(env: Record<string, string | undefined>): RecorderConfig {
  return parseEnv(recorderEnvSchema, env);
}
