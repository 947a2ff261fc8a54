import { randomUUID } from 'node:crypto';
import type { ConsumeMessage, GetMessage } from 'amqplib';
import { BrokerUnavailableError } from '../../libs/broker/index.js';
import { HEADERS, sampleEvent } from '../../libs/contracts/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { appendArrived, appendScheduled, RetryWatch } from '../../libs/stranded-retries/index.js';
import { appendRecoveryClaim } from '../../libs/stranded-retries/journal.js';
import { appendSnapshot, type WatchSnapshotV1 } from '../../libs/stranded-retries/snapshot.js';
import { type Harness, startHarness, testMerchant } from '../support/harness.js';
import { failOnceThenSucceed, Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

const byId = (receiver: Receiver, id: string) => receiver.requests.filter((r) => r.headers['webhook-id'] === id);

describe('a backlog in dispatch', () => {
  let failing: Receiver;
  let slow: Receiver;
  let harness: Harness;
  const flaky = testMerchant('m_flaky', 'http://placeholder');
  const busy = testMerchant('m_busy', 'http://placeholder');

  beforeAll(async () => {
    failing = await Receiver.start(failOnceThenSucceed());
    slow = await Receiver.start(() => ({ status: 204, delayMs: 150 }));
    flaky.webhook!.url = failing.url;
    busy.webhook!.url = slow.url;
    harness = await startHarness({
      name: 'retry-backlog',
      merchants: [flaky, busy],
      retryDelaysMs: [1_000],
      // No deferrals: the backlog stays in dispatch, as after an upstream burst across merchants.
      settings: { concurrency: 2, maxDeferrals: 0 },
      retryWatch: { overdueAfterMs: 2_000, checkEveryMs: 200 },
    });
  });

  afterAll(async () => {
    await harness?.close();
    await failing?.close();
    await slow?.close();
  });

  it('is not taken for a stranded retry: nothing is copied and every webhook is POSTed as often as it is attempted', async () => {
    const { messageId: retried } = await harness.publisher.publish(sampleEvent('payout', flaky.id));
    await waitFor('first attempt of the retried webhook', () => byId(failing, retried).length === 1, 10_000);
    const backlog: string[] = [];
    for (let i = 0; i < 200; i++) backlog.push((await harness.publisher.publish(sampleEvent('charge.completed', busy.id))).messageId);
    // The retry leaves its 1 s tier on time and waits behind ~30 s of backlog, far past RETRY_OVERDUE_AFTER.
    let most = 0;
    await waitFor('every backlog webhook delivered', async () => {
      most = Math.max(most, await harness.test.messageCount(harness.names.dispatch));
      return new Set(slow.requests.map((r) => r.headers['webhook-id'])).size === 200;
    }, 90_000, 250);
    await waitFor('the retried webhook delivered', () => byId(failing, retried).length >= 2, 10_000);
    // Let a copy, if one was made, reach the merchant.
    await waitFor('the watch has nothing waiting', () => harness.retryWatch!.waitingByQueue().size === 0, 10_000);
    await harness.retryWatch!.check();
    expect(harness.retryWatch!.stats.recovered).toBe(0);
    expect(byId(failing, retried)).toHaveLength(2);
    for (const id of backlog) expect(byId(slow, id)).toHaveLength(1);
    expect(most).toBeLessThanOrEqual(200);
    expect(harness.dispatcher.stats.superseded).toBe(0);
  }, 120_000);
});

describe('copies of one wait', () => {
  let receiver: Receiver;
  let ok: Receiver;
  let harness: Harness;
  const merchant = testMerchant('m_copies', 'http://placeholder');
  const steady = testMerchant('m_steady', 'http://placeholder');

  beforeAll(async () => {
    receiver = await Receiver.start(failOnceThenSucceed());
    ok = await Receiver.start(() => 204);
    merchant.webhook!.url = receiver.url;
    steady.webhook!.url = ok.url;
    harness = await startHarness({
      name: 'retry-copies',
      merchants: [merchant, steady],
      retryDelaysMs: [1_000],
      settings: { moveBackoffMs: [200] },
      retryWatch: { overdueAfterMs: 1_000, checkEveryMs: 100 },
    });
  });

  afterAll(async () => {
    await harness?.close();
    await receiver?.close();
    await ok?.close();
  });

  const requestsFor = (id: string) => byId(receiver, id);

  it('delivers a retry once when its move to the tier was made twice because the first confirm was lost', async () => {
    const tier = harness.names.retry(0);
    const broker = harness.broker;
    const send = broker.sendToQueue.bind(broker);
    let lost = 0;
    // The first publish to the tier lands, but its outcome is unknown (as when the publish channel
    // is renewed after a nack with publishes awaiting confirms): the dispatcher publishes again.
    broker.sendToQueue = async (queue, content, options, deadlineMs) => {
      await send(queue, content, options, deadlineMs);
      if (queue === tier && lost++ === 0) throw new BrokerUnavailableError('publish channel closed while awaiting its confirm');
    };
    try {
      const superseded = harness.dispatcher.stats.superseded;
      const { messageId } = await harness.publisher.publish(sampleEvent('payout', merchant.id));
      await waitFor('second attempt', () => requestsFor(messageId).length === 2, 15_000);
      await waitFor('the other copy dropped', () => harness.dispatcher.stats.superseded === superseded + 1, 10_000);
      expect(lost).toBeGreaterThanOrEqual(2);
      expect(requestsFor(messageId)).toHaveLength(2);
    } finally {
      broker.sendToQueue = send;
    }
  });

  it('delivers once a resent webhook whose copy reaches dispatch twice, and again when the same copy is redelivered', async () => {
    const event = sampleEvent('charge.completed', steady.id);
    const webhookId = `evt_${randomUUID()}`;
    const resent = (copyId: string) => ({
      persistent: true,
      contentType: 'application/json',
      messageId: webhookId,
      headers: {
        [HEADERS.merchantId]: steady.id,
        [HEADERS.webhookId]: webhookId,
        [HEADERS.resentAt]: new Date().toISOString(),
        [HEADERS.resentFromOffset]: 987_654,
        [HEADERS.copyId]: copyId,
      },
    });
    const body = Buffer.from(JSON.stringify(event));
    const superseded = harness.dispatcher.stats.superseded;
    await harness.test.publishRaw(harness.names.dispatch, body, resent('copy-a'));
    await harness.test.publishRaw(harness.names.dispatch, body, resent('copy-b'));
    await waitFor('one copy dropped', () => harness.dispatcher.stats.superseded === superseded + 1, 10_000);
    await waitFor('one delivery', () => byId(ok, webhookId).length === 1, 10_000);
    // The winning copy again (a crash after its arrival was journaled): delivered again, at least once.
    await harness.test.publishRaw(harness.names.dispatch, body, resent('copy-a'));
    await waitFor('the same copy delivered again', () => byId(ok, webhookId).length === 2, 10_000);
    expect(harness.dispatcher.stats.superseded).toBe(superseded + 1);
  });
});

describe('the retry watch reading the journal', () => {
  let receiver: Receiver;
  let harness: Harness;
  const merchant = testMerchant('m_journal', 'http://placeholder');
  const watches: RetryWatch[] = [];

  beforeAll(async () => {
    // Three failures, then success: three waits of one webhook.
    const failures = new Map<string, number>();
    receiver = await Receiver.start((_n, req) => {
      const id = String(req.headers['webhook-id']);
      const n = (failures.get(id) ?? 0) + 1;
      failures.set(id, n);
      return n <= 3 ? 500 : 204;
    });
    merchant.webhook!.url = receiver.url;
    harness = await startHarness({
      name: 'retry-journal',
      merchants: [merchant],
      retryDelaysMs: [300, 300, 300],
      retryWatch: { overdueAfterMs: 1_000, checkEveryMs: 100 },
    });
  });

  afterEach(async () => {
    for (const watch of watches.splice(0)) await watch.stop();
  });

  afterAll(async () => {
    await harness?.close();
    await receiver?.close();
  });

  const watch = (options: Partial<ConstructorParameters<typeof RetryWatch>[3]> = {}) => {
    const w = new RetryWatch(harness.broker, harness.names.retries, silentLogger(), {
      dispatch: harness.names.dispatch,
      tierDelaysMs: { [harness.names.retry(0)]: 300, [harness.names.retry(1)]: 300, [harness.names.retry(2)]: 300 },
      overdueAfterMs: 1_000,
      checkEveryMs: 3_600_000,
      ...options,
    });
    watches.push(w);
    return w;
  };

  it('journals a webhook body once however many times it waits', async () => {
    const { messageId } = await harness.publisher.publish(sampleEvent('payout', merchant.id));
    await waitFor('fourth attempt', () => byId(receiver, messageId).length === 4, 15_000);
    const scheduled = (await readAll(harness)).filter(
      (m) => m.properties.headers?.[HEADERS.entryType] === 'scheduled' && m.properties.headers?.[HEADERS.webhookId] === messageId,
    );
    expect(scheduled).toHaveLength(3);
    expect(scheduled[0]!.content.length).toBeGreaterThan(0);
    const first = scheduled[0]!.properties.headers![HEADERS.streamOffset];
    for (const later of scheduled.slice(1)) {
      expect(later.content.length).toBe(0);
      expect(later.properties.headers![HEADERS.bodyOffset]).toBe(first);
    }
  });

  it('appends in the background a wait the journal did not take, until it is read back, and not once it arrived', async () => {
    const w = watch({ lateBackoffMs: [200] });
    await w.start();
    await w.waitUntilCaughtUp(5_000);
    const tier = harness.names.retry(0);
    const retry = (scheduleId: string) => ({
      scheduleId,
      queue: tier,
      dueAt: Date.now() + 300_000,
      content: Buffer.from('{}'),
      properties: { headers: { [HEADERS.webhookId]: `evt_${randomUUID()}` } },
    });
    // The journal refuses this wait's next two appends (a stream without a leader).
    const refused = randomUUID();
    let refusals = 2;
    const realSend = harness.broker.sendToQueue.bind(harness.broker);
    harness.broker.sendToQueue = (queue, content, options, deadlineMs) => {
      if (options?.headers?.[HEADERS.scheduleId] === refused && refusals > 0) {
        refusals--;
        return Promise.reject(new BrokerUnavailableError('publish not confirmed within 10000 ms'));
      }
      return realSend(queue, content, options, deadlineMs);
    };
    try {
      w.keepScheduling(retry(refused));
      await waitFor('the wait recorded after the refusals', () => w.stats.recordedLate === 1, 10_000);
      expect(refusals).toBe(0);
      expect(w.waitingByQueue().get(tier)).toBe(1);
    } finally {
      harness.broker.sendToQueue = realSend;
    }
    // It came back from its tier: no watch reading this journal later takes it for a stranded one.
    await appendArrived(harness.broker, harness.names.retries, { key: refused, copyId: 'c0' }, 5_000);
    await waitFor('the wait over', () => (w.waitingByQueue().get(tier) ?? 0) === 0, 5_000);

    // Back from its tier before the journal took it: nothing is appended for it any more.
    const arrived = randomUUID();
    refusals = 0;
    w.keepScheduling(retry(arrived));
    await appendArrived(harness.broker, harness.names.retries, { key: arrived, copyId: 'c1' }, 5_000);
    await waitFor('the arrival read', () => w.arrive(arrived, 'c1'), 5_000);
    await waitFor('the background append given up', () => w.appendingLate === 0, 5_000);
    const marker = randomUUID();
    await appendArrived(harness.broker, harness.names.retries, { key: marker, copyId: 'm' }, 5_000);
    await waitFor('the marker read', () => w.arrive(marker, 'm'), 5_000);
    expect(w.stats.recordedLate).toBe(1);
    const entries = (await readAll(harness)).filter((m) => m.properties.headers?.[HEADERS.scheduleId] === arrived);
    expect(entries.length).toBeGreaterThan(0);
    expect(entries.filter((m) => m.properties.headers?.[HEADERS.entryType] === 'scheduled')).toEqual([]);
  });

  it('counts a wait whose arrival landed before its scheduled entry as arrived, not waiting', async () => {
    const w = watch();
    await w.start();
    await w.waitUntilCaughtUp(5_000);
    const scheduleId = randomUUID();
    const tier = harness.names.retry(0);
    await appendArrived(harness.broker, harness.names.retries, { key: scheduleId, copyId: 'c1' }, 5_000);
    await appendScheduled(harness.broker, harness.names.retries, {
      scheduleId,
      queue: tier,
      dueAt: Date.now(),
      content: Buffer.from('{}'),
      properties: { headers: { [HEADERS.webhookId]: `evt_${randomUUID()}` } },
    }, 5_000);
    const marker = randomUUID();
    await appendArrived(harness.broker, harness.names.retries, { key: marker, copyId: 'm' }, 5_000);
    await waitFor('the marker read', () => w.arrive(marker, 'm'), 5_000);
    expect(w.waitingByQueue().get(tier) ?? 0).toBe(0);
    expect(harness.retryWatch!.waitingByQueue().get(tier) ?? 0).toBe(0);
  });

  it('gives a watch that has just started the same verdict as one that has read everything', async () => {
    const key = randomUUID();
    expect(await harness.retryWatch!.arrive(key, 'first')).toBe(true);
    // A replica that restarts now has read nothing yet: its verdict waits for the journal.
    const late = watch();
    await late.start();
    expect(await late.arrive(key, 'second')).toBe(false);
    expect(await late.arrive(key, 'first')).toBe(true);
    expect(await harness.retryWatch!.arrive(key, 'second')).toBe(false);
  });

  it('does not copy a retry before its time on a watch whose clock runs two minutes ahead', async () => {
    // A short grace, so that a due time read from another host's clock would copy it before its 300 ms TTL.
    const ahead = watch({ clock: () => performance.now() + 120_000, checkEveryMs: 50, overdueAfterMs: 100 });
    await ahead.start();
    await ahead.waitUntilCaughtUp(5_000);
    const { messageId } = await harness.publisher.publish(sampleEvent('payout', merchant.id));
    await waitFor('fourth attempt', () => byId(receiver, messageId).length === 4, 15_000);
    await waitFor('nothing waiting', () => ahead.waitingByQueue().size === 0, 5_000);
    expect(ahead.stats.recovered).toBe(0);
    expect(byId(receiver, messageId)).toHaveLength(4);
  });

  it('starts from its newest snapshot and knows what waits, which copy arrived first, and where bodies are', async () => {
    const tier = harness.names.retry(0);
    const { messageId } = await harness.publisher.publish(sampleEvent('payout', merchant.id));
    await waitFor('first attempt', () => byId(receiver, messageId).length === 1, 10_000);
    let held: GetMessage | undefined;
    await waitFor('message waiting in the tier', async () => {
      held = (await harness.test.channel.get(tier, { noAck: true })) || undefined;
      return held !== undefined;
    }, 2_000, 20);
    const key = randomUUID();
    expect(await harness.retryWatch!.arrive(key, 'first')).toBe(true);
    const writer = watch({ snapshots: { stream: harness.names.retrySnapshots } });
    await writer.start();
    await waitFor('the writer sees it waiting', () => writer.waitingByQueue().get(tier) === 1, 5_000);
    await writer.writeSnapshot();
    expect(writer.stats.snapshots).toBe(1);

    const reader = watch({ snapshots: { stream: harness.names.retrySnapshots } });
    await reader.start();
    expect(reader.waitingByQueue().get(tier)).toBe(1);
    const waitKey = held!.properties.headers![HEADERS.scheduleId] as string;
    expect(reader.bodyOffsetOf(waitKey)).toBe(writer.bodyOffsetOf(waitKey));
    expect(reader.bodyOffsetOf(waitKey)).toBeDefined();
    expect(await reader.arrive(key, 'second')).toBe(false);
    await reader.waitUntilCaughtUp(5_000);
    // Stranded: it is recovered from the body the snapshot points at.
    await waitFor('recovered and delivered', () => byId(receiver, messageId).length === 2, 15_000);
  });

  it('takes over a claim whose holder went away, even for a wait not due yet on its own clock (it read the entry later)', async () => {
    const journal = `${harness.prefix}.journal-claimed`;
    await harness.test.channel.assertQueue(journal, { durable: true, arguments: { 'x-queue-type': 'stream', 'x-max-age': '1D' } });
    try {
      // This watch counts the wait due in an hour, as one that started long after the others read it would.
      const late = new RetryWatch(harness.broker, journal, silentLogger(), { dispatch: harness.names.dispatch, tierDelaysMs: { tier: 3_600_000 }, overdueAfterMs: 500, checkEveryMs: 3_600_000 });
      watches.push(late);
      await late.start();
      await late.waitUntilCaughtUp(5_000);
      const scheduleId = randomUUID();
      const webhookId = `evt_${randomUUID()}`;
      const properties = { messageId: webhookId, contentType: 'application/json', headers: { [HEADERS.webhookId]: webhookId, [HEADERS.merchantId]: merchant.id, [HEADERS.attempts]: 1 } };
      await appendScheduled(harness.broker, journal, { scheduleId, queue: 'tier', dueAt: Date.now(), content: Buffer.from(JSON.stringify(sampleEvent('payout', merchant.id))), properties }, 5_000);
      // Another watch found it stranded, claimed it, and went away before putting a copy back.
      await appendRecoveryClaim(harness.broker, journal, { claimId: randomUUID(), scheduleIds: [scheduleId], replaces: {} }, 5_000);
      await waitFor('the claim read', () => late.memory().claims === 1, 5_000);
      await waitFor('the claim taken over and the wait recovered', async () => {
        await late.check();
        return late.stats.recovered === 1;
      }, 15_000, 100);
    } finally {
      await harness.test.channel.deleteQueue(journal).catch(() => {});
    }
  });

  it('starts from a snapshot of the JSON format written before issue 29, and writes one of its own format that the next start reads the same', async () => {
    const journal = `${harness.prefix}.journal-v1`;
    const snapshots = `${harness.prefix}.journal-v1.snapshots`;
    const args = { 'x-queue-type': 'stream', 'x-max-age': '1D' };
    await harness.test.channel.assertQueue(journal, { durable: true, arguments: args });
    await harness.test.channel.assertQueue(snapshots, { durable: true, arguments: args });
    try {
      const uuidKey = randomUUID();
      const keys = ['v1-wait-0', 'v1-wait-1', uuidKey, 'v1-arrived'];
      for (const scheduleId of keys) {
        await appendScheduled(harness.broker, journal, { scheduleId, queue: 'tier', dueAt: 0, content: Buffer.from('{}'), properties: { headers: { [HEADERS.webhookId]: `evt_${scheduleId}` } } }, 5_000);
      }
      // As a dispatcher of the version before wrote it, covering those four entries (offsets 0 to 3).
      const v1: WatchSnapshotV1 = {
        v: 1,
        covers: 3,
        waits: [
          ['v1-wait-0', 0, 0, 'evt_v1-wait-0', 'tier', 300_000, null, null],
          ['v1-wait-1', 1, 1, 'evt_v1-wait-1', 'tier', 300_000, 'claim-1', 100],
          [uuidKey, 2, 2, `evt_${uuidKey}`, 'tier', 300_000, null, null],
        ],
        arrivals: [['v1-arrived', 'copy-a', 1_000, false]],
        bodies: [['evt_v1-wait-0', 0, 1_000]],
      };
      await appendSnapshot(harness.broker, snapshots, Buffer.from(JSON.stringify(v1)), 5_000);
      const options = { tierDelaysMs: { tier: 300_000 }, snapshots: { stream: snapshots } };
      const start = async () => {
        const w = new RetryWatch(harness.broker, journal, silentLogger(), { dispatch: harness.names.dispatch, overdueAfterMs: 1_000, checkEveryMs: 3_600_000, ...options });
        watches.push(w);
        await w.start();
        await w.waitUntilCaughtUp(10_000);
        return w;
      };
      const restored = await start();
      expect(restored.waitingByQueue().get('tier')).toBe(3);
      expect(await restored.arrive('v1-arrived', 'copy-b')).toBe(false);
      expect(await restored.arrive('v1-arrived', 'copy-a')).toBe(true);
      expect(restored.bodyOffsetOf('v1-wait-0')).toBe(0);
      await restored.writeSnapshot();
      expect(restored.stats.snapshots).toBe(1);
      await restored.stop();
      // The next start reads the new format: the same waits, and the same copy arrived first.
      const next = await start();
      expect(next.waitingByQueue().get('tier')).toBe(3);
      expect(await next.arrive('v1-arrived', 'copy-b')).toBe(false);
      expect(next.bodyOffsetOf(uuidKey)).toBe(2);
      expect(next.memory().claims).toBe(1);
    } finally {
      await harness.test.channel.deleteQueue(journal).catch(() => {});
      await harness.test.channel.deleteQueue(snapshots).catch(() => {});
    }
  });

  it('ignores a snapshot that covers more than a journal deleted and declared again holds, and reads that journal from its start', async () => {
    const journal = `${harness.prefix}.journal-again`;
    const snapshots = `${harness.prefix}.journal-again.snapshots`;
    const args = { 'x-queue-type': 'stream', 'x-max-age': '1D' };
    const declare = async () => {
      await harness.test.channel.assertQueue(journal, { durable: true, arguments: args });
      await harness.test.channel.assertQueue(snapshots, { durable: true, arguments: args });
    };
    await declare();
    try {
      const options = { tierDelaysMs: { tier: 300 }, snapshots: { stream: snapshots } };
      const other = (stream: string) =>
        new RetryWatch(harness.broker, stream, silentLogger(), { dispatch: harness.names.dispatch, overdueAfterMs: 1_000, checkEveryMs: 3_600_000, ...options });
      const first = other(journal);
      watches.push(first);
      await first.start();
      for (let i = 0; i < 20; i++) {
        await appendScheduled(harness.broker, journal, { scheduleId: `old-${i}`, queue: 'tier', dueAt: 0, content: Buffer.from('{}'), properties: { headers: {} } }, 5_000);
      }
      await waitFor('the first watch sees them', () => first.waitingByQueue().get('tier') === 20, 5_000);
      await first.writeSnapshot();
      await first.stop();
      // An operator deletes the journal; the next start declares it again, empty.
      await harness.test.channel.deleteQueue(journal);
      await declare();
      await appendScheduled(harness.broker, journal, { scheduleId: 'new', queue: 'tier', dueAt: 0, content: Buffer.from('{}'), properties: { headers: {} } }, 5_000);
      const again = other(journal);
      watches.push(again);
      await again.start();
      await again.waitUntilCaughtUp(10_000);
      expect(again.waitingByQueue().get('tier')).toBe(1);
    } finally {
      await harness.test.channel.deleteQueue(journal).catch(() => {});
      await harness.test.channel.deleteQueue(snapshots).catch(() => {});
    }
  });

  it('ignores a snapshot of a deleted journal once the journal declared again has grown past the offset it covers', async () => {
    const journal = `${harness.prefix}.journal-grown`;
    const snapshots = `${harness.prefix}.journal-grown.snapshots`;
    const args = { 'x-queue-type': 'stream', 'x-max-age': '1D' };
    const declare = async () => {
      await harness.test.channel.assertQueue(journal, { durable: true, arguments: args });
      await harness.test.channel.assertQueue(snapshots, { durable: true, arguments: args });
    };
    const wait = (scheduleId: string, queue: string) =>
      appendScheduled(harness.broker, journal, { scheduleId, queue, dueAt: 0, content: Buffer.from('{}'), properties: { headers: {} } }, 5_000);
    await declare();
    try {
      const options = { tierDelaysMs: { old: 300, new: 300 }, snapshots: { stream: snapshots } };
      const other = () =>
        new RetryWatch(harness.broker, journal, silentLogger(), { dispatch: harness.names.dispatch, overdueAfterMs: 1_000, checkEveryMs: 3_600_000, ...options });
      const first = other();
      watches.push(first);
      await first.start();
      for (let i = 0; i < 5; i++) await wait(`old-${i}`, 'old');
      await waitFor('the first watch sees them', () => first.waitingByQueue().get('old') === 5, 5_000);
      await first.writeSnapshot();
      await first.stop();
      // Deleted and declared again, and written to past the offset the snapshot covers before
      // the next watch starts: an entry is there, but not the one the snapshot covered.
      await harness.test.channel.deleteQueue(journal);
      await declare();
      for (let i = 0; i < 8; i++) await wait(`new-${i}`, 'new');
      const again = other();
      watches.push(again);
      await again.start();
      await again.waitUntilCaughtUp(10_000);
      expect(Object.fromEntries(again.waitingByQueue())).toEqual({ new: 8 });
    } finally {
      await harness.test.channel.deleteQueue(journal).catch(() => {});
      await harness.test.channel.deleteQueue(snapshots).catch(() => {});
    }
  });
});

/** Every entry of the journal so far: appends a marker and reads until it. */
async function readAll(harness: Harness): Promise<ConsumeMessage[]> {
  const marker = randomUUID();
  await appendArrived(harness.broker, harness.names.retries, { key: marker }, 5_000);
  const channel = await harness.broker.createChannel();
  await channel.prefetch(1_000);
  const entries: ConsumeMessage[] = [];
  const { consumerTag } = await channel.consume(
    harness.names.retries,
    (message) => {
      if (!message) return;
      entries.push(message);
      channel.ack(message);
    },
    { arguments: { 'x-stream-offset': 'first' } },
  );
  try {
    await waitFor('the marker read', () => entries.some((m) => m.properties.headers?.[HEADERS.scheduleId] === marker), 10_000);
    return entries;
  } finally {
    await channel.cancel(consumerTag).catch(() => {});
    await channel.close().catch(() => {});
  }
}
