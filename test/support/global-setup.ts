import amqp from 'amqplib';
import { makeDatabaseTemplate } from './databases.js';
import { useRunTmpdir } from './run-tmpdir.js';

/** Where the programs look when RABBITMQ_URL is unset (the default of envFields.rabbitmqUrl). */
export const LOCAL_BROKER_URL = 'amqp://guest:guest@127.0.0.1:5672';

/** True when an AMQP broker accepts a connection at `url` within `timeoutMs`. */
export async function brokerAnswers(url: string, timeoutMs = 3_000): Promise<boolean> {
  try {
    const connection = await amqp.connect(url, { timeout: timeoutMs });
    await connection.close();
    return true;
  } catch {
    return false;
  }
}

/**
 * Tests need a real RabbitMQ: RABBITMQ_URL when it is set (CI, this machine); else the local broker
 * on 127.0.0.1:5672 when one answers there, as the programs use it; else a testcontainers RabbitMQ
 * when Docker is available; else a message saying which to provide.
 */
export default async function globalSetup(): Promise<void> {
  useRunTmpdir();
  await makeDatabaseTemplate();
  if (process.env.RABBITMQ_URL) return;
  if (await brokerAnswers(LOCAL_BROKER_URL)) {
    process.env.RABBITMQ_URL = LOCAL_BROKER_URL;
    return;
  }
  try {
    const { RabbitMQContainer } = await import('@testcontainers/rabbitmq');
    const container = await new RabbitMQContainer('rabbitmq:4-management').start();
    (globalThis as Record<string, unknown>).__RABBITMQ_CONTAINER__ = container;
    process.env.RABBITMQ_URL = container.getAmqpUrl();
    process.env.RABBITMQ_CONTAINER_ID = container.getId(); // for the broker-restart tests
  } catch (err) {
    throw new Error(
      `The tests need RabbitMQ. None answers on ${LOCAL_BROKER_URL.replace('guest:guest@', '')}; set RABBITMQ_URL ` +
        '(e.g. amqp://user:pass@host:5672) to use another broker, or make Docker available so testcontainers can start one. ' +
        `Docker said: ${(err as Error).message}`,
    );
  }
}
