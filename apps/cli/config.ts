import { z } from 'zod';
import { envFields, parseEnv, replicationFields } from '../../libs/config/index.js';

/** What the broker commands read: only the broker and the topology, so other programs' settings never stop them. */
export const cliEnvSchema = z.object({
  RABBITMQ_URL: envFields.rabbitmqUrl,
  TOPOLOGY_PREFIX: envFields.topologyPrefix,
  ...replicationFields,
});

export type CliConfig = z.infer<typeof cliEnvSchema>;

export function loadCliConfig(env: Record<string, string | undefined>): CliConfig {
  return parseEnv(cliEnvSchema, env);
}
