import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { promisify } from 'node:util';

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
  const host = new URL(process.env.RABBITMQ_URL ?? 'amqp://127.0.0.1').hostname;
  const ctl = ['/usr/sbin/rabbitmqctl', '/usr/lib/rabbitmq/bin/rabbitmqctl', '/usr/local/sbin/rabbitmqctl'].find(existsSync);
  let command: (action: string) => Promise<unknown>;
  if (container) command = (action) => run('docker', ['exec', container, 'rabbitmqctl', action], { timeout: 120_000 });
  else if (ctl && ['127.0.0.1', 'localhost', '::1'].includes(host)) command = (action) => run(ctl, [action], { timeout: 120_000 });
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
