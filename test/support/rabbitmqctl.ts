import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { promisify } from 'node:util';

const run = promisify(execFile);

const binary = ['/usr/sbin/rabbitmqctl', '/usr/lib/rabbitmq/bin/rabbitmqctl', '/usr/local/sbin/rabbitmqctl'].find(existsSync);

/**
 * rabbitmqctl for the local node the tests use, or undefined when there is none (no binary, or
 * RABBITMQ_URL names another machine). RABBITMQ_NODENAME names the node when it is not the
 * default one (a node of its own beside the one on 5672), so a fault test never stops another's.
 */
export function localCtl(): ((args: string[]) => Promise<{ stdout: string }>) | undefined {
  const host = new URL(process.env.RABBITMQ_URL ?? 'amqp://127.0.0.1').hostname;
  if (!binary || !['127.0.0.1', 'localhost', '::1'].includes(host)) return undefined;
  const node = process.env.RABBITMQ_NODENAME;
  const prefix = node ? ['-n', node] : [];
  return (args) => run(binary, [...prefix, ...args], { timeout: 120_000 });
}
