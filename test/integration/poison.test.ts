import { parkedOf } from '../../apps/cli/invalid.js';
import { sampleEvent } from '../../libs/contracts/index.js';
import { DISPATCH_DELIVERY_LIMIT, declareIntake, topologyNames } from '../../libs/topology/index.js';
import { TestBroker, brokerUrl, uniquePrefix } from '../support/broker.js';
import { testMerchant } from '../support/harness.js';
import { seedMerchants, TEST_SECRETS_KEY } from '../support/merchant-rows.js';
import { useTestDatabase } from '../support/postgres.js';
import { startProgram } from '../support/process.js';
import { Receiver } from '../support/receiver.js';

const DISPATCHER = 'dist/apps/dispatcher/main.js';

describe('a message that keeps killing the dispatcher', () => {
  const prefix = uniquePrefix('poison');
  const own = useTestDatabase('poison');
  let test: TestBroker;

  beforeAll(async () => {
    test = await TestBroker.open();
  });

  afterAll(async () => {
    await test.deleteTopology(prefix);
    await test.close();
  });

  it('ends in invalid with its reason after a bounded number of deliveries, through repeated kill -9', async () => {
    // The merchant never answers, so every dispatcher dies holding the message, as in a crash loop.
    const receiver = await Receiver.start(() => 'hang');
    const merchant = testMerchant('m_poison', receiver.url);
    await seedMerchants(own.db.url, [merchant]);
    const names = topologyNames(prefix);
    try {
      const ch = await test.connection.createConfirmChannel();
      await declareIntake(ch, prefix);
      ch.publish(names.events, 'payout', Buffer.from(JSON.stringify(sampleEvent('payout', merchant.id))), { persistent: true, messageId: 'evt_poison' });
      await ch.waitForConfirms();
      await ch.close();

      let kills = 0;
      for (; kills < DISPATCH_DELIVERY_LIMIT + 5; kills++) {
        if ((await test.messageCount(names.invalid).catch(() => 0)) > 0) break;
        const program = startProgram(DISPATCHER, {
          RABBITMQ_URL: brokerUrl(),
          TOPOLOGY_PREFIX: prefix,
          DATABASE_URL: own.db.url,
          SECRETS_KEY: TEST_SECRETS_KEY,
          RETRY_SCHEDULE: '',
          ALLOW_PRIVATE_TARGETS: 'true',
          METRICS_PORT: '0',
          DELIVERY_TIMEOUT_MS: '120000',
        });
        const before = receiver.requests.length;
        const arrived = await Promise.race([
          receiver.waitForRequests(before + 1, 20_000).then(() => true, () => false),
          program.finished.then(() => false),
        ]);
        program.child.kill('SIGKILL');
        await program.finished;
        if (!arrived) {
          // Nothing delivered to this process: the broker has dead-lettered the message already.
          break;
        }
      }
      const [parked] = await test.drain(names.invalid, 1, 10_000);
      expect(parked!.properties.messageId).toBe('evt_poison');
      expect(parked!.properties.headers?.['x-first-death-reason']).toBe('delivery_limit');
      expect(parkedOf(parked!, names).code).toBe('delivery-limit');
      expect(receiver.requests.length).toBeLessThanOrEqual(DISPATCH_DELIVERY_LIMIT + 1);
      expect(await test.messageCount(names.dispatch)).toBe(0);
    } finally {
      await receiver.close();
    }
  }, 180_000);
});
