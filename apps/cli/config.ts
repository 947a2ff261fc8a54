import { z } from 'zod';
import { MAX_ENDPOINTS_PER_MERCHANT } from '../../libs/merchants/schema.js';
import { deliveryLogFields, envFields, merchantStoreFields, replicationFields, tracingFields } from '../../libs/config/index.js';

/** What the commands read: the broker and the topology, and for merchants the database; other programs' settings never stop them. */
export const cliEnvSchema = z.object({
  RABBITMQ_URL: envFields.rabbitmqUrl,
  TOPOLOGY_PREFIX: envFields.topologyPrefix,
  ...replicationFields,
  /** merchants endpoints add/set: http endpoint URLs are accepted only in development mode, private address literals only with this. */
  WEBHOOKS_DEV: envFields.boolean(false),
  ALLOW_PRIVATE_TARGETS: envFields.boolean(false),
  /** merchants endpoints add: the most endpoints a merchant may have (as the admin API's). */
  MAX_ENDPOINTS_PER_MERCHANT: envFields.positiveInt(MAX_ENDPOINTS_PER_MERCHANT, MAX_ENDPOINTS_PER_MERCHANT),
  /** merchants: the database where merchants live, and the key their secrets are sealed with. */
  DATABASE_URL: deliveryLogFields.DATABASE_URL,
  SECRETS_KEY: merchantStoreFields.SECRETS_KEY,
  SECRETS_KEY_PREVIOUS: merchantStoreFields.SECRETS_KEY_PREVIOUS,
  /** publish: with an OTLP endpoint, each event's publish span is exported and its traceparent travels with it. */
  ...tracingFields,
});

export type CliConfig = z.infer<typeof cliEnvSchema>;
