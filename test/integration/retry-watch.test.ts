import { randomUUID } from 'node:crypto';
import type { GetMessage } from 'amqplib';
import { HEADERS, sampleEvent } from '../../libs/contracts/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { appendArrived, appendScheduled, RetryWatch } from '../../libs/stranded-retries/index.js';
import { type Harness, startHarness, testMerchant } from '../support/harness.js';
import { failOnceThenSucceed, Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

const DELAY_MS = 3_000;

/** The offset of the entry of a stream whose x-schedule-id is `key`. */
async function offsetInStream(harness: Harness, stream: string, key: string): Promise<number> {
  const ch = await harness.test.connection.createChannel();
  await ch.prefetch(1_000);
  let offset: number | undefined;
  const { consumerTag } = await ch.consume(stream, (msg) => {
    if (!msg) return;
    if (msg.properties.headers?.[HEADERS.scheduleId] === key) offset = msg.properties.headers[HEADERS.streamOffset] as number;
    ch.ack(msg);
  }, { arguments: { 'x-stream-offset': 'first' } });
  try {
    return await waitFor(`${key} read from ${stream}`, () => offset, 10_000);
  } finally {
    await ch.cancel(consumerTag).catch(() => {});
    await ch.close().catch(() => {});
  }
}
const OVERDUE_AFTER_MS = 1_000;

/**
 * A retry tier that never hands a message back (a dead-letter worker stuck after a leader change,
 * RabbitMQ 3.10 and 4.x) is simulated by taking the message out of the tier before it expires:
 * from the dispatcher's side both look the same, a wait that does not end.
 */
describe('the retry watch', () => {
  let receiver: Receiver;
  let harness: Harness;
  let second: RetryWatch | undefined;
  const merchant = testMerchant('m_watch', 'http://placeholder');

  beforeAll(async () => {
    // Every webhook fails its first attempt and succeeds after.
    receiver = await Receiver.start(failOnceThenSucceed());
    merchant.webhook!.url = receiver.url;
    harness = await startHarness({
      name: 'retry-watch',
      merchants: [merchant],
      retryDelaysMs: [DELAY_MS],
      retryWatch: { overdueAfterMs: OVERDUE_AFTER_MS, checkEveryMs: 100 },
    });
  });

  afterAll(async () => {
    await second?.stop();
    await harness?.close();
    await receiver?.close();
  });

  const requestsFor = (id: string) => receiver.requests.filter((r) => r.headers['webhook-id'] === id);

  it('leaves a retry its tier hands back on time alone', async () => {
    const { messageId } = await harness.publisher.publish(sampleEvent('payout', merchant.id));
    await waitFor('second attempt', () => requestsFor(messageId).length === 2, 15_000);
    // Once its arrival is in the journal the watch has nothing to recover.
    await waitFor('arrival recorded', () => harness.retryWatch!.waitingByQueue().size === 0, 5_000);
    expect(harness.retryWatch!.stats.recovered).toBe(0);
    expect(requestsFor(messageId)).toHaveLength(2);
  });

  it('puts back, once across two watches, a retry its tier holds, and drops the original when it comes out late', async () => {
    const tier = harness.names.retry(0);
    const { messageId } = await harness.publisher.publish(sampleEvent('charge.completed', merchant.id));
    await waitFor('first attempt', () => requestsFor(messageId).length === 1, 10_000);
    // Take it out of the tier well before its 3 s are up: the tier will never hand it back.
    let held: GetMessage | undefined;
    await waitFor('message waiting in the tier', async () => {
      held = (await harness.test.channel.get(tier, { noAck: true })) || undefined;
      return held !== undefined;
    }, 2_000, 20);
    const scheduleId = held!.properties.headers![HEADERS.scheduleId] as string;
    expect(typeof scheduleId).toBe('string');
    expect(held!.properties.headers![HEADERS.dueAt]).toBeGreaterThan(Date.now());
    // Operators see it waiting although the queue shows nothing ready.
    await waitFor('counted as waiting', () => harness.retryWatch!.waitingByQueue().get(tier) === 1, 5_000);
    expect(await harness.test.messageCount(tier)).toBe(0);

    // A second dispatcher's watch, started now, rebuilds the same picture from the journal and competes.
    second = new RetryWatch(harness.broker, harness.names.retries, silentLogger(), {
      dispatch: harness.names.dispatch,
      tierDelaysMs: { [tier]: DELAY_MS },
      overdueAfterMs: OVERDUE_AFTER_MS,
      checkEveryMs: 100,
    });
    await second.start();
    await waitFor('second watch sees it waiting', () => second!.waitingByQueue().get(tier) === 1, 5_000);

    await waitFor('second attempt, from the recovered copy', () => requestsFor(messageId).length === 2, 15_000);
    const [first, again] = requestsFor(messageId);
    expect(again!.at - first!.at).toBeGreaterThanOrEqual(DELAY_MS + OVERDUE_AFTER_MS - 50);
    expect(harness.retryWatch!.stats.recovered + second.stats.recovered).toBe(1);
    await waitFor('the copy arrived', () => harness.retryWatch!.waitingByQueue().size === 0 && second!.waitingByQueue().size === 0, 5_000);

    // The tier lets the original go at last: it reaches dispatch as the broker's dead-lettering would.
    await harness.test.publishRaw(harness.names.dispatch, held!.content, { ...held!.properties, headers: held!.properties.headers });
    await waitFor('late original dropped', () => harness.dispatcher.stats.superseded === 1, 10_000);
    expect(requestsFor(messageId)).toHaveLength(2);
    // Neither watch makes another copy.
    expect(harness.retryWatch!.stats.recovered + second.stats.recovered).toBe(1);
  });

  it('makes one copy when two watches claim the same overdue retry at the same instant', async () => {
    const tier = harness.names.retry(0);
    const { messageId } = await harness.publisher.publish(sampleEvent('payout', merchant.id));
    await waitFor('first attempt', () => requestsFor(messageId).length === 1, 10_000);
    await waitFor('message waiting in the tier', async () => (await harness.test.channel.get(tier, { noAck: true })) !== false, 2_000, 20);
    // Two watches that take the tier for an instant one see it stranded at once, long before the
    // harness's own watch does, and claim it in the same moment: stream order must pick one.
    const racers = [0, 1].map(
      () => new RetryWatch(harness.broker, harness.names.retries, silentLogger(), {
        dispatch: harness.names.dispatch,
        tierDelaysMs: { [tier]: 0 },
        overdueAfterMs: 10,
        checkEveryMs: 3_600_000,
      }),
    );
    try {
      for (const racer of racers) await racer.start();
      await waitFor('both see it waiting', () => racers.every((r) => r.ready && r.waitingByQueue().get(tier) === 1), 5_000);
      // Both check at the same instant, round after round: the first sees dispatch empty after the
      // wait was due, and once it is 10 ms stranded both claim it together.
      await waitFor('a copy made', async () => {
        await Promise.all(racers.map((r) => r.check()));
        return racers[0]!.stats.recovered + racers[1]!.stats.recovered > 0;
      }, 5_000, 10);
      expect(racers[0]!.stats.recovered + racers[1]!.stats.recovered).toBe(1);
      await waitFor('second attempt, from the one copy', () => requestsFor(messageId).length === 2, 10_000);
      await waitFor('the copy arrived', () => racers.every((r) => r.waitingByQueue().size === 0), 5_000);
      await Promise.all(racers.map((r) => r.check()));
      expect(racers[0]!.stats.recovered + racers[1]!.stats.recovered).toBe(1);
      expect(requestsFor(messageId)).toHaveLength(2);
    } finally {
      for (const racer of racers) await racer.stop();
    }
  });

  it("does not recover a wait whose body pointer names another webhook's entry (an offset of a journal deleted since)", async () => {
    const tier = harness.names.retry(0);
    const journal = harness.names.retries;
    const stamp = randomUUID();
    const scheduled = (webhookId: string, bodyOffset?: number) => ({
      scheduleId: `${webhookId}-wait`,
      queue: tier,
      dueAt: Date.now(),
      content: Buffer.from(JSON.stringify(sampleEvent('payout', merchant.id))),
      properties: { messageId: webhookId, contentType: 'application/json', headers: { [HEADERS.webhookId]: webhookId, [HEADERS.merchantId]: merchant.id, [HEADERS.attempts]: 1 } },
      bodyOffset,
    });
    // Another webhook's wait, with its body; it has arrived, so nothing recovers it.
    const other = `evt_other_${stamp}`;
    await appendScheduled(harness.broker, journal, scheduled(other), 5_000);
    await appendArrived(harness.broker, journal, { key: `${other}-wait`, copyId: 'c' }, 5_000);
    const otherOffset = await offsetInStream(harness, journal, `${other}-wait`);
    // A wait that points at it for its body, as a move journaled just after a deletion would.
    const lost = `evt_lost_${stamp}`;
    const unrecoverable = harness.retryWatch!.stats.unrecoverable + (second?.stats.unrecoverable ?? 0);
    const recovered = harness.retryWatch!.stats.recovered + (second?.stats.recovered ?? 0);
    await appendScheduled(harness.broker, journal, scheduled(lost, otherOffset), 5_000);
    const watches = () => [harness.retryWatch!, ...(second ? [second] : [])];
    await waitFor('counted as waiting', () => watches().every((w) => w.waitingByQueue().get(tier) === 1), 5_000);
    // Whichever watch wins its claim gives it up; another one does when it takes the claim over.
    await waitFor('given up as unrecoverable', () => watches().every((w) => !w.waitingByQueue().has(tier)), 15_000);
    expect(watches().reduce((n, w) => n + w.stats.unrecoverable, 0)).toBeGreaterThan(unrecoverable);
    expect(watches().reduce((n, w) => n + w.stats.recovered, 0)).toBe(recovered);
    expect(requestsFor(lost)).toHaveLength(0);
    expect(requestsFor(other)).toHaveLength(0);
  });
});

/**
 * A tier whose dead-letter worker stopped after its leader was lost (seen on the three-node 3.10
 * cluster) holds every message moved into it, hundreds at once: the watch puts them all back in a
 * few claims, every webhook attempted once more, none twice. The tier is simulated by a consumer
 * that takes each message as it lands.
 */
describe.each([
  ['all in memory', undefined],
  // Issue 29: 170 of them wait on disk, read back as the first ones are put back.
  ['30 in memory and the rest on disk', 30],
])('the retry watch, when a whole tier stops handing messages back (%s)', (_, waitsInMemoryPerTier) => {
  const WEBHOOKS = 200;
  let receiver: Receiver;
  let harness: Harness;
  let consumerTag: string | undefined;

  beforeAll(async () => {
    receiver = await Receiver.start(failOnceThenSucceed());
    // A merchant (an endpoint, a circuit) per webhook: one shared endpoint's circuit would open.
    const merchants = Array.from({ length: WEBHOOKS }, (_, i) => testMerchant(`m_tier_${i}`, `${receiver.url}/${i}`));
    harness = await startHarness({
      name: 'retry-watch-tier',
      merchants,
      retryDelaysMs: [1_000],
      retryWatch: { overdueAfterMs: 500, checkEveryMs: 100, maxPerCheck: 50, waitsInMemoryPerTier },
    });
  });

  afterAll(async () => {
    if (consumerTag) await harness?.test.channel.cancel(consumerTag);
    await harness?.close();
    await receiver?.close();
  });

  it('puts back every retry it holds, a claim of 50 at a time, and each webhook is attempted exactly twice', async () => {
    const held: string[] = [];
    ({ consumerTag } = await harness.test.channel.consume(harness.names.retry(0), (message) => {
      if (message) held.push(String(message.properties.headers?.[HEADERS.scheduleId]));
    }, { noAck: true }));
    const ids: string[] = [];
    for (let i = 0; i < WEBHOOKS; i++) ids.push((await harness.publisher.publish(sampleEvent('payout', `m_tier_${i}`))).messageId);
    const attempts = () => {
      const count = new Map<string, number>();
      for (const r of receiver.requests) count.set(String(r.headers['webhook-id']), (count.get(String(r.headers['webhook-id'])) ?? 0) + 1);
      return count;
    };
    await waitFor('every webhook attempted twice', () => ids.every((id) => attempts().get(id) === 2), 60_000, 200);
    expect(held).toHaveLength(WEBHOOKS);
    expect(harness.retryWatch!.stats.recovered).toBe(WEBHOOKS);
    await waitFor('every copy arrived', () => harness.retryWatch!.waitingByQueue().size === 0, 10_000);
    // No copy made twice: every webhook was POSTed twice, not three times.
    expect([...attempts().values()].filter((n) => n !== 2)).toEqual([]);
  }, 90_000);
});
