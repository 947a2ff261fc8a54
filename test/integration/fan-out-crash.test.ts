import { loadRecorderConfig } from '../../apps/recorder/config.js';
import { type RecorderProgram, startRecorder } from '../../apps/recorder/program.js';
import { sampleEvent } from '../../libs/contracts/index.js';
import { BrokerConnection } from '../../libs/broker/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { EventPublisher } from '../../libs/publisher/index.js';
import { declareIntake } from '../../libs/topology/index.js';
import { TestBroker, brokerUrl, uniquePrefix } from '../support/broker.js';
import { testMerchant, testSecret } from '../support/harness.js';
import { seedMerchants, TEST_SECRETS_KEY } from '../support/merchant-rows.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';
import { startProgram } from '../support/process.js';
import { Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

const DISPATCHER = 'dist/apps/dispatcher/main.js';
const EVENTS = 10;

/**
 * Issue 56: a fanned-out event's endpoints are walked from the one message in the dispatcher's
 * process, and the message is acked only once every endpoint's delivery is settled. A dispatcher
 * killed with -9 while one endpoint's requests hang (the other's delivered and in the delivery
 * log) loses nothing: the message comes back, is not taken for a repeat of itself (idempotent
 * intake), and every endpoint gets every event at least once.
 */
describe('fan-out after kill -9', () => {
  const prefix = uniquePrefix('fanout-crash');
  let test: TestBroker;
  let database: TestDatabase;
  let broker: BrokerConnection;
  let recorder: RecorderProgram | undefined;
  let receiver: Receiver;
  let slowHangs = true;

  beforeAll(async () => {
    test = await TestBroker.open();
    database = await createTestDatabase('fanout_crash');
    broker = new BrokerConnection({ url: brokerUrl(), name: 'test-fanout-crash', logger: silentLogger() });
    await broker.open(10_000);
    receiver = await Receiver.start((_n, req) => (req.path.endsWith('/slow') && slowHangs ? 'hang' : 204));
  });

  afterAll(async () => {
    await receiver?.close();
    await recorder?.stop();
    await broker?.close();
    await test?.deleteTopology(prefix);
    await test?.close();
    await database?.drop();
  });

  it('delivers every event to every endpoint at least once when the dispatcher dies with one endpoint in flight', async () => {
    const merchant = testMerchant('m_fan_crash', receiver.url, {
      endpoints: [
        { id: 'ep_m_fan_crash_fast', url: `${receiver.url}/fast`, enabled: true, secret: testSecret() },
        { id: 'ep_m_fan_crash_slow', url: `${receiver.url}/slow`, enabled: true, secret: testSecret() },
      ],
    });
    await seedMerchants(database.url, [merchant]);
    const env = {
      RABBITMQ_URL: brokerUrl(),
      TOPOLOGY_PREFIX: prefix,
      SECRETS_KEY: TEST_SECRETS_KEY,
      RETRY_SCHEDULE: '1s,1s',
      DATABASE_URL: database.url,
      // Each endpoint's share (half) holds all of them: none waits as 'busy'.
      DISPATCH_CONCURRENCY: String(4 * EVENTS),
      // The slow endpoint's requests hang until the kill.
      DELIVERY_TIMEOUT_MS: '60000',
      ALLOW_PRIVATE_TARGETS: 'true',
      METRICS_PORT: '0',
      FAILED_RETENTION: '1D',
    };
    const channel = await broker.createChannel();
    await declareIntake(channel, prefix);
    await channel.close();
    const first = startProgram(DISPATCHER, env);
    const ids: string[] = [];
    try {
      // The recorder writes the fast endpoint's records to the log, as in production.
      await waitFor('the dispatcher consuming', () => first.output.stdout.includes('dispatcher consuming'), 15_000);
      recorder = await startRecorder(loadRecorderConfig({ RABBITMQ_URL: brokerUrl(), TOPOLOGY_PREFIX: prefix, DATABASE_URL: database.url, FAILED_RETENTION: '1D' }), silentLogger());
      const publisher = new EventPublisher(broker, prefix);
      for (let i = 0; i < EVENTS; i++) ids.push((await publisher.publish(sampleEvent('payout', merchant.id))).messageId);
      const at = (name: string) => new Set(receiver.requests.filter((r) => r.path.endsWith(`/${name}`)).map((r) => String(r.headers['webhook-id'])));
      await waitFor('the fast endpoint has them all, the slow one holds them all', () => at('fast').size === EVENTS && receiver.held === EVENTS, 15_000);
      await waitFor('the fast deliveries in the log', async () =>
        (await database.query<{ n: number }>('SELECT count(DISTINCT webhook_id)::int AS n FROM delivery_webhooks WHERE merchant_id = $1', [merchant.id]))[0]!.n === EVENTS, 15_000);
    } finally {
      first.child.kill('SIGKILL');
    }
    expect((await first.finished).code).toBeNull();
    const killedAt = Date.now();
    slowHangs = false;
    const fastBefore = receiver.requests.filter((r) => r.path.endsWith('/fast')).length;

    const second = startProgram(DISPATCHER, env);
    try {
      // Answered only after the restart: what the slow endpoint held open died with the first dispatcher.
      const slowAfter = () => new Set(receiver.requests.filter((r) => r.path.endsWith('/slow') && r.at >= killedAt).map((r) => String(r.headers['webhook-id'])));
      await waitFor('the slow endpoint has them all after the restart', () => ids.every((id) => slowAfter().has(id)), 30_000).catch((err: unknown) => {
        throw new Error(`${(err as Error).message}: ${slowAfter().size} of ${EVENTS}\n${second.output.stdout.slice(-3000)}`);
      });
    } finally {
      second.child.kill('SIGTERM');
      await second.finished;
    }
    // Every event reached the fast endpoint, some again after the restart (same webhook-id: at least once).
    const fast = receiver.requests.filter((r) => r.path.endsWith('/fast'));
    for (const id of ids) expect(fast.some((r) => r.headers['webhook-id'] === id)).toBe(true);
    expect(fast.length).toBeGreaterThanOrEqual(fastBefore);
    expect(await test.messageCount(`${prefix}.invalid`)).toBe(0);
  }, 90_000);
});
