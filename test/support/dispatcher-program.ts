import { loadDispatcherConfig } from '../../apps/dispatcher/config.js';
import { type DispatcherProgram, startDispatcher } from '../../apps/dispatcher/program.js';
import { silentLogger } from '../../libs/logger/index.js';
import { brokerUrl } from './broker.js';

/** The dispatcher program as deployed with the broker directory: one attempt, loopback merchants allowed. */
export function startBrokerDirectoryDispatcher(prefix: string, env: Record<string, string> = {}): Promise<DispatcherProgram> {
  return startDispatcher(
    loadDispatcherConfig({
      RABBITMQ_URL: brokerUrl(),
      TOPOLOGY_PREFIX: prefix,
      MERCHANT_DIRECTORY: 'broker',
      RETRY_SCHEDULE: '',
      FAILED_RETENTION: '1D',
      ALLOW_PRIVATE_TARGETS: 'true',
      METRICS_PORT: '0',
      ...env,
    }),
    silentLogger(),
  );
}
