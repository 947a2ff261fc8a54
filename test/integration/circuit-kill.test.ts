import { sampleEvent } from '../../libs/contracts/index.js';
import { BrokerConnection } from '../../libs/broker/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { EventPublisher } from '../../libs/publisher/index.js';
import { declareIntake } from '../../libs/topology/index.js';
import { TestBroker, brokerUrl, uniquePrefix } from '../support/broker.js';
import { testMerchant } from '../support/harness.js';
import { seedMerchants, TEST_SECRETS_KEY } from '../support/merchant-rows.js';
import { createTestDatabase } from '../support/postgres.js';
import { startProgram } from '../support/process.js';
import { freePort, Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

const DISPATCHER = 'dist/apps/dispatcher/main.js';

/**
 * A circuit opens with the wait of the failure that opens it (its row): a dispatcher killed with -9
 * at that failure, before its wait is written, opens nothing. Its webhooks are the broker's again
 * (unacked): redelivered to another dispatcher, which attempts them anew (the killed one's failures
 * do not count there) and opens the row after failures of its own; none is lost.
 */
describe('a dispatcher killed with -9 at the failure that would open its endpoint’s circuit', () => {
  it('opens no row; another dispatcher is redelivered its webhooks, retries them, opens the row with its own failures, and every webhook waits', async () => {
    const prefix = uniquePrefix('circuit-kill');
    const database = await createTestDatabase('circuit_kill');
    const test = await TestBroker.open();
    const broker = new BrokerConnection({ url: brokerUrl(), name: 'test-circuit-kill', logger: silentLogger() });
    let first: ReturnType<typeof startProgram> | undefined;
    let second: ReturnType<typeof startProgram> | undefined;
    let holding = true;
    const receiver = await Receiver.start((n) => {
      // The fifth failure in a row would open the circuit: the dispatcher dies before its answer.
      if (n === 4) first?.child.kill('SIGKILL');
      // The second's five failures (5-9) open the row; what it sends after is held until its breaker
      // has heard of the row, else how many more go depends on how late the announcement is (all of
      // them, 400 ms late on a loaded machine).
      if (n >= 10 && holding) return 'hang';
      return 500;
    });
    const merchant = testMerchant('m_circuit_kill', receiver.url);
    await seedMerchants(database.url, [merchant]);
    const env = {
      RABBITMQ_URL: brokerUrl(),
      TOPOLOGY_PREFIX: prefix,
      SECRETS_KEY: TEST_SECRETS_KEY,
      RETRY_SCHEDULE: '10m,10m',
      DATABASE_URL: database.url,
      // One request at a time to the endpoint: its failures come in order.
      DISPATCH_CONCURRENCY: '2',
      ALLOW_PRIVATE_TARGETS: 'true',
      METRICS_PORT: '0',
      LOG_LEVEL: 'info',
    };
    try {
      await broker.open(10_000);
      const channel = await broker.createChannel();
      await declareIntake(channel, prefix);
      await channel.close();
      const publisher = new EventPublisher(broker, prefix);
      const ids = new Set<string>();
      for (let i = 0; i < 20; i++) ids.add((await publisher.publish(sampleEvent('payout', merchant.id))).messageId);

      first = startProgram(DISPATCHER, env);
      expect((await first.finished).code).toBeNull();
      expect(receiver.requests.length).toBe(5);
      await waitFor("the killed dispatcher's sessions ended", async () => (await database.query<{ n: number }>(
        "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND application_name LIKE 'webhooks-dispatcher%'"))[0]!.n === 0, 15_000);
      // Four failures written (their waits), the fifth never seen: no row.
      expect(await database.query('SELECT 1 FROM wait_circuits')).toEqual([]);
      const waitingAtKill = (await database.query('SELECT 1 FROM webhook_waits')).length;
      expect(waitingAtKill).toBeLessThanOrEqual(4);

      // Its breaker's state is the metric webhooks_circuits_open: held until it has heard of the row.
      const metricsPort = await freePort();
      second = startProgram(DISPATCHER, { ...env, METRICS_PORT: String(metricsPort) });
      const breakerOpen = async () => /^webhooks_circuits_open(\{[^}]*\})? 1$/m.test(await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text().catch(() => ''));
      await waitFor("the row open and the second's breaker open with it", async () =>
        (await database.query('SELECT 1 FROM wait_circuits WHERE NOT closing')).length === 1 && (await breakerOpen().catch(() => false)), 30_000);
      holding = false;
      receiver.answerHeld(500);
      await waitFor('every webhook waiting in its row, the circuit open', async () =>
        (await database.query('SELECT DISTINCT webhook_id FROM webhook_waits')).length === 20
        && (await database.query('SELECT 1 FROM wait_circuits WHERE NOT closing')).length === 1, 30_000);
      await waitFor('dispatch empty', async () => (await test.messageCount(`${prefix}.dispatch`)) === 0, 10_000);
      const waits = (await database.query<{ webhook_id: string }>('SELECT webhook_id FROM webhook_waits')).map((w) => w.webhook_id);
      expect(new Set(waits)).toEqual(ids);
      // The killed dispatcher's fifth attempt is made again (not a duplicate delivery: it failed),
      // then the second's own five failures open the row, and one more at most goes before it hears
      // of it (held here); the rest are postponed, unsent.
      expect(receiver.requests.length).toBeLessThanOrEqual(11);
      const attempted = new Set(receiver.requests.map((r) => String(r.headers['webhook-id'])));
      expect(attempted.size).toBeLessThan(20);
    } finally {
      first?.child.kill('SIGKILL');
      if (second) {
        second.child.kill('SIGTERM');
        await second.finished;
      }
      await receiver.close();
      await broker.close();
      await test.deleteTopology(prefix);
      await test.close();
      await database.drop();
    }
  }, 90_000);
});
