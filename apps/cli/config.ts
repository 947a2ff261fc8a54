import { z } from 'zod';
import { MAX_ENDPOINTS_PER_MERCHANT } from '../../libs/merchants/schema.js';
import { deliveryLogFields, envFields, merchantStoreFields, replicationFields, tracingFields } from '../../libs/config/index.js';

/** What the commands read: the broker and the topology, and for merchants the database; other programs' settings never stop them. */
export const cliEnvSchema = z.object({
  RABBITMQ_URL: envFields.rabbitmqUrl,
  TOPOLOGY_PREFIX: envFields.topologyPrefix,
  ...replicationFields,
  // merchants endpoints: http URLs only in development mode, private addresses only with ALLOW_PRIVATE_TARGETS.
  WEBHOOKS_DEV: envFields.boolean(false),
  ALLOW_PRIVATE_TARGETS: envFields.boolean(false),
  MAX_ENDPOINTS_PER_MERCHANT: envFields.positiveInt(MAX_ENDPOINTS_PER_MERCHANT, MAX_ENDPOINTS_PER_MERCHANT),
  DATABASE_URL: deliveryLogFields.DATABASE_URL,
  SECRETS_KEY: merchantStoreFields.SECRETS_KEY,
  SECRETS_KEY_PREVIOUS: merchantStoreFields.SECRETS_KEY_PREVIOUS,
  // publish: each event's publish span, exported with an OTLP endpoint.
  ...tracingFields,
});

export type CliConfig = z.infer<typeof cliEnvSchema>;
