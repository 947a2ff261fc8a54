import { loadDispatcherConfig } from '../../apps/dispatcher/config.js';
import { brokerUrl, type TestBroker } from './broker.js';
import { TEST_SECRETS_KEY } from './dispatcher-program.js';

/** An operational event as a platform service's own queue on `<prefix>.operational` receives it. */
export interface Seen {
  type: string;
  messageId: string;
  body: string;
  data: Record<string, any>;
}

/** A queue of the test's own bound to <prefix>.operational, as a platform service would bind one. */
export async function collect(test: TestBroker, prefix: string): Promise<Seen[]> {
  const seen: Seen[] = [];
  const queue = `${prefix}.test-subscriber`;
  await test.channel.assertQueue(queue, { durable: false, autoDelete: true });
  await test.channel.bindQueue(queue, `${prefix}.operational`, '#');
  await test.channel.consume(queue, (message) => {
    if (!message) return;
    const body = message.content.toString('utf8');
    const parsed = JSON.parse(body) as { type: string; data: Record<string, any> };
    expect(message.fields.routingKey).toBe(parsed.type);
    seen.push({ type: parsed.type, messageId: String(message.properties.messageId), body, data: parsed.data });
  }, { noAck: true });
  return seen;
}

/** The dispatcher's config for the operational tests: five attempts 100 ms apart (the 4th failed one makes a webhook "failing"). */
export function dispatcherEnv(prefix: string, env: Record<string, string | undefined>) {
  return loadDispatcherConfig({
    RABBITMQ_URL: brokerUrl(),
    TOPOLOGY_PREFIX: prefix,
    SECRETS_KEY: TEST_SECRETS_KEY,
    RETRY_SCHEDULE: '100ms,100ms,100ms,100ms',
    FAILED_RETENTION: '1D',
    ALLOW_PRIVATE_TARGETS: 'true',
    METRICS_PORT: '0',
    ...env,
  });
}

/** The API's environment with merchants in the database. */
export const DATABASE_DIRECTORY = { WEBHOOKS_DEV: 'true', ALLOW_PRIVATE_TARGETS: 'true', SECRETS_KEY: TEST_SECRETS_KEY };
