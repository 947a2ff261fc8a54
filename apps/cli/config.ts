import { z } from 'zod';
import { envFields, parseEnv } from '../../libs/config/index.js';

/** What the broker commands read: only the broker and the topology, so other programs' settings never stop them. */
export const cliEnvSchema = z.object({
  RABBITMQ_URL: envFields.rabbitmqUrl,
  TOPOLOGY_PREFIX: envFields.topologyPrefix,
  /** Members of each quorum queue and replicas of the failed stream when created; the broker caps them at its nodes. */
  QUORUM_GROUP_SIZE: envFields.positiveInt(3, 99),
  STREAM_CLUSTER_SIZE: envFields.positiveInt(3, 99),
});

export type CliConfig = z.infer<typeof cliEnvSchema>;

export function loadCliConfig(env: Record<string, string | undefined>): CliConfig {
  return parseEnv(cliEnvSchema, env);
}
