import type { GetMessage } from 'amqplib';
import { sampleEvent } from '../../libs/contracts/index.js';
import { type Database, DeliveryLogRecorder, openPostgres } from '../../libs/delivery-store/index.js';
import { type Logger, silentLogger } from '../../libs/logger/index.js';

const consoleLogger = (): Logger => ({ ...silentLogger(), warn: (m: string, f?: object) => console.log(m, f), error: (m: string, f?: object) => console.log(m, f), info: (m: string, f?: object) => console.log(m, f) }) as Logger;
import { RetryNet, type RetryNetOptions } from '../../libs/retry-net/index.js';
import { type Harness, startHarness, testMerchant } from '../support/harness.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';
import { failOnceThenSucceed, Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

/**
 * The retry safety net against a real broker and PostgreSQL: a dispatcher with the delivery log,
 * a recorder, and the net (grace 2 s). Every webhook's first attempt fails (500) and its retry
 * waits 3 s in tier 0; the next attempt succeeds. What the tier does with it is each test's fault.
 */
const GRACE_MS = 2_000;

describe('the retry safety net', () => {
  let db: TestDatabase;
  let database: Database;
  let receiver: Receiver;
  let harness: Harness;
  let recorder: DeliveryLogRecorder;
  const nets: RetryNet[] = [];
  const merchant = testMerchant('m_net', 'http://placeholder');

  function net(queries: Database, options: Partial<RetryNetOptions> = {}): RetryNet {
    const made = new RetryNet(queries, harness.broker, silentLogger(), {
      graceMs: GRACE_MS,
      attemptBoundMs: 1_000,
      dispatch: harness.names.dispatch,
      deliveriesStream: harness.names.deliveries,
      tickMs: 200,
      ...options,
    });
    nets.push(made);
    return made;
  }

  const requestsFor = (id: string) => receiver.requests.filter((r) => r.headers['webhook-id'] === id).length;

  /** Publishes `n` events and waits for each first attempt (failed, so each now waits in tier 0). */
  async function failedOnce(n: number): Promise<string[]> {
    const ids: string[] = [];
    for (let i = 0; i < n; i++) ids.push((await harness.publisher.publish(sampleEvent('payout', merchant.id))).messageId);
    await waitFor('every first attempt', () => ids.every((id) => requestsFor(id) === 1), 15_000);
    return ids;
  }

  /** A stalled tier: its messages taken out as they come, held unacked (they would have been dead-lettered). */
  async function holdTier(n: number): Promise<GetMessage[]> {
    const held: GetMessage[] = [];
    await waitFor(`${n} messages held out of tier 0`, async () => {
      for (;;) {
        const message = await harness.test.channel.get(harness.names.retry(0), { noAck: false });
        if (!message) break;
        held.push(message);
      }
      return held.length === n;
    }, 10_000, 20);
    return held;
  }

  /** The stalled tier hands them back at last: each original lands in dispatch, late. */
  async function putBack(held: GetMessage[]): Promise<void> {
    for (const message of held) {
      await harness.test.publishRaw(harness.names.dispatch, message.content, message.properties);
      harness.test.channel.ack(message);
    }
  }

  beforeAll(async () => {
    db = await createTestDatabase('retry_net');
  });

  beforeEach(async () => {
    receiver = await Receiver.start(failOnceThenSucceed());
    merchant.webhook!.url = receiver.url;
    database = openPostgres(db.url);
    await database.query('TRUNCATE delivery_webhooks, retry_claims');
  });

  afterEach(async () => {
    for (const made of nets.splice(0)) await made.stop();
    await recorder?.stop();
    await harness?.close();
    await database?.close();
    await receiver?.close();
  });

  afterAll(async () => {
    await db?.drop();
  });

  /** The dispatcher and its net (the one late originals ask), on `queries` (the test database by default). */
  async function start(options: Partial<RetryNetOptions> = {}, queries?: Database, verbose = false): Promise<RetryNet> {
    let made: RetryNet | undefined;
    harness = await startHarness({
      name: 'retry-net',
      merchants: [merchant],
      retryDelaysMs: [3_000],
      deliveryLog: true,
      // Every first attempt fails: a circuit opened by them would postpone the copies instead.
      settings: { deliveryTimeoutMs: 500, breakerThreshold: 1_000 },
      retryNet: (broker, names) =>
        (made = new RetryNet(queries ?? database, broker, verbose ? consoleLogger() : silentLogger(), {
          graceMs: GRACE_MS,
          attemptBoundMs: 1_000,
          dispatch: names.dispatch,
          deliveriesStream: names.deliveries,
          tickMs: 200,
          ...options,
        })),
    });
    nets.push(made!);
    recorder = new DeliveryLogRecorder(harness.broker, database, silentLogger(), { prefix: harness.prefix, retentionMs: 30 * 86_400_000, retryMs: 200, checkpointEveryMs: 300, flushAfterMs: 50 });
    await recorder.start();
    return made!;
  }

  it('delivers each webhook of a deleted tier once, from the copy it republishes', async () => {
    const dispatcherNet = await start();
    const ids = await failedOnce(5);
    // Every move landed first: a move after the deletion declares the tier again and lands there.
    await waitFor('every retry in its tier', () => harness.dispatcher.stats.retried === 5, 10_000);
    await harness.test.channel.deleteQueue(harness.names.retry(0));
    await waitFor('each delivered from its copy', () => ids.every((id) => requestsFor(id) === 2), 30_000);
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    expect(ids.map(requestsFor)).toEqual(ids.map(() => 2));
    expect(dispatcherNet.stats.copies).toBe(5);
  }, 60_000);

  it('delivers a stalled retry once: the copy, and the original dropped when the tier hands it back late', async () => {
    const dispatcherNet = await start();
    const [ids, held] = await Promise.all([failedOnce(3), holdTier(3)]);
    await waitFor('each delivered from its copy', () => ids.every((id) => requestsFor(id) === 2), 30_000);
    await putBack(held);
    await waitFor('the originals dropped', () => harness.dispatcher.stats.superseded === 3, 10_000);
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    expect(ids.map(requestsFor)).toEqual(ids.map(() => 2));
    expect(dispatcherNet.stats).toMatchObject({ copies: 3, originalsDropped: 3 });
  }, 60_000);

  it('delivers once when the late originals and the copies race in dispatch (a backlog longer than the grace)', async () => {
    const racer = await start({ tickMs: 3_600_000 });
    const [ids, held] = await Promise.all([failedOnce(20), holdTier(20)]);
    await waitFor('overdue', () => Date.now() - Number(held.at(-1)!.properties.headers!['x-due-at']) > GRACE_MS * 2.5, 20_000, 100);
    // Half the originals first, then the net's pass and the other half at once.
    await putBack(held.slice(0, 10));
    await Promise.all([racer.tick(), putBack(held.slice(10))]);
    await waitFor('every webhook delivered', () => ids.every((id) => requestsFor(id) >= 2), 20_000);
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    expect(ids.map(requestsFor)).toEqual(ids.map(() => 2));
    // Each webhook went one way: its original claimed first and was delivered (no copy), or the net
    // claimed first and its original was dropped. Which way a webhook goes depends on when the
    // dispatcher takes its original, so only the pairing is fixed, not how many go each way.
    await waitFor('every copied original dropped', () => harness.dispatcher.stats.superseded === racer.stats.copies, 10_000);
  }, 60_000);

  it('republishes one copy when two dispatchers run the net at once', async () => {
    const one = await start({ tickMs: 3_600_000 });
    const other = openPostgres(db.url);
    try {
      const two = net(other, { tickMs: 3_600_000 });
      const [ids] = await Promise.all([failedOnce(10), holdTier(10)]);
      await waitFor('copies republished', async () => {
        await Promise.all([one.tick(), two.tick()]);
        return one.stats.copies + two.stats.copies >= 10;
      }, 20_000, 100);
      await waitFor('each delivered', () => ids.every((id) => requestsFor(id) === 2), 15_000);
      await Promise.all([one.tick(), two.tick()]);
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      expect(one.stats.copies + two.stats.copies).toBe(10);
      expect(ids.map(requestsFor)).toEqual(ids.map(() => 2));
    } finally {
      await other.close();
    }
  }, 60_000);

  it('takes over the claims of a dispatcher killed between its claim and its copy; the originals are dropped', async () => {
    await start({ tickMs: 3_600_000 });
    const [ids, held] = await Promise.all([failedOnce(4), holdTier(4)]);
    // What a net killed mid-pass leaves: its claims, never confirmed in dispatch.
    const late = (message: GetMessage) => ({ due: Number(message.properties.headers!['x-due-at']), id: String(message.properties.messageId) });
    for (const message of held) {
      const { due, id } = late(message);
      await database.query(`INSERT INTO retry_claims (merchant_id, webhook_id, attempt, due_at, claimed_by, claimed_at) VALUES ($1, $2, 1, $3, 'net', now() - interval '1 minute')`, [merchant.id, id, new Date(due).toISOString()]);
    }
    await waitFor('originals late', () => Date.now() - late(held[0]!).due > GRACE_MS, 10_000, 100);
    await putBack(held);
    await waitFor('the originals dropped', () => harness.dispatcher.stats.superseded === 4, 10_000);
    const survivor = net(database);
    survivor.start();
    await waitFor('each delivered from a copy', () => ids.every((id) => requestsFor(id) === 2), 30_000);
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    expect(ids.map(requestsFor)).toEqual(ids.map(() => 2));
    expect(survivor.stats.copies).toBe(4);
  }, 60_000);

  it('keeps retries flowing with PostgreSQL down: a late original is delivered, the net idle, nothing twice', async () => {
    const down = openPostgres('postgres://postgres@127.0.0.1:1/none', { connectTimeoutMs: 300 });
    try {
      const idle = await start({}, down);
      const [ids, held] = await Promise.all([failedOnce(3), holdTier(3)]);
      await waitFor('late', () => Date.now() - Number(held[0]!.properties.headers!['x-due-at']) > GRACE_MS, 10_000, 100);
      await putBack(held);
      await waitFor('each delivered by its late original', () => ids.every((id) => requestsFor(id) === 2), 15_000);
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      expect(ids.map(requestsFor)).toEqual(ids.map(() => 2));
      expect(idle.stats).toMatchObject({ copies: 0, originalsDropped: 0, claimsUnanswered: 3 });
      expect(harness.dispatcher.stats.superseded).toBe(0);
    } finally {
      await down.close().catch(() => {});
    }
  }, 60_000);
});
