/**
 * Tests need a real RabbitMQ: RABBITMQ_URL when it is set (CI, this machine), else a
 * testcontainers RabbitMQ when Docker is available, else a message saying which to provide.
 */
export default async function globalSetup(): Promise<void> {
  if (process.env.RABBITMQ_URL) return;
  try {
    const { RabbitMQContainer } = await import('@testcontainers/rabbitmq');
    const container = await new RabbitMQContainer('rabbitmq:4-management').start();
    (globalThis as Record<string, unknown>).__RABBITMQ_CONTAINER__ = container;
    process.env.RABBITMQ_URL = container.getAmqpUrl();
    process.env.RABBITMQ_CONTAINER_ID = container.getId(); // for the broker-restart tests
  } catch (err) {
    throw new Error(
      'The tests need RabbitMQ. Set RABBITMQ_URL (e.g. amqp://guest:guest@127.0.0.1:5672) to use a running broker, ' +
        `or make Docker available so testcontainers can start one. Docker said: ${(err as Error).message}`,
    );
  }
}
