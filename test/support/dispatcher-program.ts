import { loadDispatcherConfig } from '../../apps/dispatcher/config.js';
import { type DispatcherOptions, type DispatcherProgram, startDispatcher } from '../../apps/dispatcher/program.js';
import { silentLogger } from '../../libs/logger/index.js';
import { brokerUrl } from './broker.js';
import { TEST_SECRETS_KEY } from './merchant-rows.js';

export { TEST_SECRETS_KEY };

/** The dispatcher program as deployed, merchants in the database at `databaseUrl`: one attempt, loopback merchants allowed. */
export function startDatabaseDispatcher(prefix: string, databaseUrl: string, env: Record<string, string> = {}, options: DispatcherOptions = {}): Promise<DispatcherProgram> {
  return startDispatcher(
    loadDispatcherConfig({
      RABBITMQ_URL: brokerUrl(),
      TOPOLOGY_PREFIX: prefix,
      DATABASE_URL: databaseUrl,
      SECRETS_KEY: TEST_SECRETS_KEY,
      RETRY_SCHEDULE: '',
      FAILED_RETENTION: '1D',
      ALLOW_PRIVATE_TARGETS: 'true',
      METRICS_PORT: '0',
      ...env,
    }),
    silentLogger(),
    options,
  );
}
