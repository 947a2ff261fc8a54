import { z } from 'zod';
import { envFields, parseEnv } from '../../libs/config/index.js';

export const apiEnvSchema = z
  .object({
    RABBITMQ_URL: envFields.rabbitmqUrl,
    TOPOLOGY_PREFIX: envFields.topologyPrefix,
    PORT: z
      .string()
      .default('8080')
      .refine((v) => /^\d+$/.test(v) && Number(v) <= 65_535, 'must be a port number from 0 to 65535')
      .transform(Number),
    MERCHANTS_FILE: envFields.filePath.default('config/merchants.dev.json'),
    // Both programs declare the whole topology, so the API needs the same schedule and retention.
    RETRY_SCHEDULE: envFields.retrySchedule,
    FAILED_RETENTION: envFields.streamMaxAge,
    AUTH_JWT_SECRET: z.string().min(32, 'must be at least 32 characters (256 bits for HS256)').optional(),
    AUTH_JWKS_URL: z.url({ protocol: /^https?$/, error: 'must be an http(s) URL' }).optional(),
    LOG_LEVEL: envFields.logLevel,
  })
  .superRefine((env, ctx) => {
    if (!env.AUTH_JWT_SECRET && !env.AUTH_JWKS_URL) {
      ctx.addIssue({ code: 'custom', path: ['AUTH_JWT_SECRET'], message: 'set AUTH_JWT_SECRET or AUTH_JWKS_URL to verify access tokens' });
    } else if (env.AUTH_JWT_SECRET && env.AUTH_JWKS_URL) {
      ctx.addIssue({ code: 'custom', path: ['AUTH_JWKS_URL'], message: 'set AUTH_JWT_SECRET or AUTH_JWKS_URL, not both' });
    }
  });

export type ApiConfig = z.infer<typeof apiEnvSchema>;

export function loadApiConfig(env: Record<string, string | undefined>): ApiConfig {
  return parseEnv(apiEnvSchema, env);
}
