import { z } from 'zod';
import { envFields, parseEnv } from '../../libs/config/index.js';
import { WEBHOOK_SECRET } from '../../libs/merchants/schema.js';

export const demoReceiverEnvSchema = z.object({
  DEMO_RECEIVER_PORT: envFields.positiveInt(4400, 65_535),
  // Loopback unless told otherwise: in compose the dispatcher reaches it over the network (0.0.0.0).
  DEMO_RECEIVER_HOST: z
    .string()
    .default('127.0.0.1')
    .refine((v) => /^[A-Za-z0-9.:_-]+$/.test(v), 'must be a host name or an IP address'),
  // A merchant's webhook.secret's rule, so a secret the directory accepts also works here.
  DEMO_WEBHOOK_SECRET: z.string().regex(WEBHOOK_SECRET, 'must be whsec_ followed by base64'),
  LOG_LEVEL: envFields.logLevel,
});

export function loadDemoReceiverConfig(env: Record<string, string | undefined>) {
  return parseEnv(demoReceiverEnvSchema, env);
}
