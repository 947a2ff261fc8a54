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
    ...tracingFields,
  })
  .superRefine((env, ctx) => {
    // Not requireMerchantStore: in development mode too, it has no embedded database of its own.
    if (!env.DATABASE_URL) {
      ctx.addIssue({ code: 'custom', path: ['DATABASE_URL'], message: 'is required to run the recorder on its own (npm start runs one with an embedded database)' });
    }
  });

export type RecorderConfig = z.infer<typeof recorderEnvSchema>;

export function loadRecorderConfig(env: Record<string, string | undefined>): RecorderConfig {
  return parseEnv(recorderEnvSchema, env);
}
