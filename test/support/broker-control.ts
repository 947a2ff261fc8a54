import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { localCtl } from './rabbitmqctl.js';

const run = promisify(execFile);

export interface BrokerControl {
  stop(): Promise<void>;
  start(): Promise<void>;
}

/**
 * Stops and starts the RabbitMQ application the tests use: the local node via rabbitmqctl, or the
 * testcontainers one via docker exec. Undefined when the broker is elsewhere and cannot be controlled.
 */
export function brokerControl(): BrokerControl | undefined {
  const container = process.env.RABBITMQ_CONTAINER_ID;
  const ctl = localCtl();
  let command: (action: string) => Promise<unknown>;
  if (container) command = (action) => run('docker', ['exec', container, 'rabbitmqctl', action], { timeout: 120_000 });
  else if (ctl) command = (action) => ctl([action]);
  else return undefined;
  return {
    stop: async () => {
      await command('stop_app');
    },
    start: async () => {
      await command('start_app');
      await command('await_startup');
    },
  };
}
