import { randomUUID } from 'node:crypto';
import { HEADERS, sampleEvent } from '../../libs/contracts/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { appendArrived, appendScheduled, RetryWatch } from '../../libs/stranded-retries/index.js';
import { type Harness, startHarness, testMerchant } from '../support/harness.js';
import { waitFor } from '../support/wait.js';

/**
 * Issue 29: a watch keeps at most `waitsInMemoryPerTier` waits of a tier in memory and the rest
 * on local disk, in order. What it answers must not change: how many wait, which arrived (also
 * when one on disk arrives before its turn), and what a snapshot carries to the next process.
 */
describe('the retry watch with waits on disk', () => {
  const WINDOW = 100;
  const WAITS = 2_500;
  let harness: Harness;
  const merchant = testMerchant('m_spill', 'http://127.0.0.1:9/');
  const watches: RetryWatch[] = [];
  let journal: string;
  let snapshots: string;

  beforeAll(async () => {
    harness = await startHarness({ name: 'retry-watch-spill', merchants: [merchant], retryDelaysMs: [600_000] });
    journal = `${harness.prefix}.spill-journal`;
    snapshots = `${harness.prefix}.spill-journal.snapshots`;
    const args = { 'x-queue-type': 'stream', 'x-max-age': '1D' };
    await harness.test.channel.assertQueue(journal, { durable: true, arguments: args });
    await harness.test.channel.assertQueue(snapshots, { durable: true, arguments: args });
  });

  afterAll(async () => {
    for (const watch of watches.splice(0)) await watch.stop();
    await harness?.test.channel.deleteQueue(journal).catch(() => {});
    await harness?.test.channel.deleteQueue(snapshots).catch(() => {});
    await harness?.close();
  });

  const watch = (options: Partial<ConstructorParameters<typeof RetryWatch>[3]> = {}) => {
    const w = new RetryWatch(harness.broker, journal, silentLogger(), {
      dispatch: harness.names.dispatch,
      tierDelaysMs: { tier: 3_600_000, other: 3_600_000 },
      overdueAfterMs: 120_000,
      checkEveryMs: 3_600_000,
      waitsInMemoryPerTier: WINDOW,
      snapshots: { stream: snapshots, everyEntries: 1e9, everyMs: 1e9 },
      ...options,
    });
    watches.push(w);
    return w;
  };
  const total = (w: RetryWatch) => [...w.waitingByQueue().values()].reduce((a, b) => a + b, 0);
  /** Appends an arrival and waits until `w` has read it (its verdict is the journal's). */
  const arrived = async (w: RetryWatch, key: string) => expect(await w.arrive(key, `copy-${key}`)).toBe(true);

  it('holds a window in memory and the rest on disk, answers the same, and carries both through a snapshot', async () => {
    const writer = watch();
    await writer.start();
    await writer.waitUntilCaughtUp(5_000);
    const body = Buffer.from(JSON.stringify(sampleEvent('payout', merchant.id)));
    const keys = Array.from({ length: WAITS }, () => randomUUID());
    // A resend's wait key is no UUID: it is held as a string, in memory and on disk.
    keys[WAITS - 7] = `resend:${randomUUID()}`;
    for (let i = 0; i < WAITS; i += 250) {
      await Promise.all(
        keys.slice(i, i + 250).map((scheduleId, j) =>
          appendScheduled(harness.broker, journal, { scheduleId, queue: (i + j) % 5 === 0 ? 'other' : 'tier', dueAt: Date.now(), content: body, properties: { headers: { [HEADERS.webhookId]: `evt_${scheduleId}` } } }, 10_000),
        ),
      );
    }
    await waitFor('every wait read', () => total(writer) === WAITS, 20_000, 50);
    const memory = writer.memory();
    expect(memory.waits).toBe(WAITS);
    // 2 tiers of at most 100 in memory: the rest is on disk.
    expect(memory.waitsOnDisk).toBeGreaterThanOrEqual(WAITS - 2 * WINDOW);
    expect(memory.diskBytes).toBeGreaterThan(memory.waitsOnDisk * 40);

    // The first 1,000 come back in order, and two on disk come back before their turn.
    for (let i = 0; i < 1_000; i += 100) await Promise.all(keys.slice(i, i + 100).map((key) => arrived(writer, key)));
    const early = [keys[2_000]!, keys[WAITS - 7]!];
    for (const key of early) await arrived(writer, key);
    // Those two are counted until their turn comes and they are read back from disk (and dropped).
    expect(total(writer)).toBe(WAITS - 1_000);
    await writer.writeSnapshot();
    expect(writer.stats.snapshots).toBe(1);

    // The next process starts from that snapshot: the same waits, in memory and on disk.
    const reader = watch();
    await reader.start();
    expect(reader.stats.restoredFromSnapshot).toBe(3);
    expect(total(reader)).toBe(WAITS - 1_000);
    expect(reader.memory().waitsOnDisk).toBeGreaterThan(0);
    await reader.waitUntilCaughtUp(5_000);
    expect(reader.waitingByQueue()).toEqual(writer.waitingByQueue());

    // The rest come back in order; the early ones are not taken for waiting when read back from disk.
    const rest = keys.slice(1_000).filter((key) => !early.includes(key));
    for (let i = 0; i < rest.length; i += 100) await Promise.all(rest.slice(i, i + 100).map((key) => arrived(reader, key)));
    await waitFor('nothing waiting on the writer either', () => total(writer) === 0, 10_000);
    for (const w of [writer, reader]) {
      expect(total(w)).toBe(0);
      expect(w.memory()).toMatchObject({ waits: 0, waitsOnDisk: 0, diskBytes: 0 });
    }
    // And a copy that comes out again is not delivered twice.
    expect(await reader.arrive(early[0]!, 'another copy')).toBe(false);
    expect(await reader.arrive(rest[rest.length - 1]!, 'another copy')).toBe(false);
  }, 120_000);

  it('puts on disk what a snapshot of a watch that held everything in memory holds past its window', async () => {
    const writer = watch({ waitsInMemoryPerTier: 1_000_000 });
    await writer.start();
    await writer.waitUntilCaughtUp(5_000);
    const before = total(writer);
    const keys = Array.from({ length: 400 }, () => randomUUID());
    await Promise.all(keys.map((scheduleId) => appendScheduled(harness.broker, journal, { scheduleId, queue: 'tier', dueAt: Date.now(), content: Buffer.from('{}'), properties: { headers: {} } }, 10_000)));
    await waitFor('every wait read', () => total(writer) === before + 400, 20_000, 50);
    expect(writer.memory().waitsOnDisk).toBe(0);
    await writer.writeSnapshot();
    const reader = watch();
    await reader.start();
    expect(reader.stats.restoredFromSnapshot).toBe(2);
    expect(reader.waitingByQueue()).toEqual(writer.waitingByQueue());
    expect(before).toBe(0);
    expect(reader.memory().waitsOnDisk).toBe(400 - WINDOW);
    for (const key of keys) await appendArrived(harness.broker, journal, { key, copyId: 'c' }, 5_000);
    await waitFor('all back', () => total(reader) === before, 10_000);
  }, 60_000);

  it('waits at start-up for as long as the journal is being read, not a fixed time (3,600,000 waits took over 2 min)', async () => {
    // A journal of its own that takes well over 100 ms to read, without a snapshot to start from.
    const long = `${harness.prefix}.spill-journal-long`;
    let fixed: RetryWatch | undefined;
    let reading: RetryWatch | undefined;
    await harness.test.channel.assertQueue(long, { durable: true, arguments: { 'x-queue-type': 'stream', 'x-max-age': '1D' } });
    try {
      const body = Buffer.alloc(2_000, 'x');
      for (let i = 0; i < 20_000; i += 500) {
        await Promise.all(Array.from({ length: 500 }, () => appendScheduled(harness.broker, long, { scheduleId: randomUUID(), queue: 'tier', dueAt: Date.now(), content: body, properties: { headers: {} } }, 10_000)));
      }
      const options = { dispatch: harness.names.dispatch, tierDelaysMs: { tier: 3_600_000 }, overdueAfterMs: 120_000, checkEveryMs: 3_600_000 };
      fixed = new RetryWatch(harness.broker, long, silentLogger(), options);
      reading = new RetryWatch(harness.broker, long, silentLogger(), options);
      await fixed.start();
      await expect(fixed.waitUntilCaughtUp(100)).rejects.toThrow('not read up to date within 100 ms');
      await reading.start();
      // Reading has begun (a consumer takes a moment to attach); it goes on for about a second.
      const reader = reading;
      await waitFor('the first entries read', () => total(reader) > 0, 10_000, 5);
      const progress: number[] = [];
      // A stall of 300 ms, not 100, counts as stopped: on a slow, shared machine a stream chunk
      // can take over 100 ms to come, and the read still takes several times that.
      await reader.waitUntilCaughtUpWhileReading(300, (offset) => progress.push(offset));
      expect(progress.length).toBeGreaterThan(0);
      expect(reader.ready).toBe(true);
      expect(total(reader)).toBe(20_000);
    } finally {
      // Stopped before their stream goes: a stream deleted under its readers is another test's matter.
      await fixed?.stop();
      await reading?.stop();
      await harness.test.channel.deleteQueue(long).catch(() => {});
    }
  }, 120_000);

  it('reads the whole journal when a snapshot part is missing, and finds the same waits', async () => {
    const writer = watch();
    await writer.start();
    await writer.waitUntilCaughtUp(5_000);
    const before = total(writer);
    const body = Buffer.from('{}');
    const keys = Array.from({ length: 300 }, () => randomUUID());
    await Promise.all(keys.map((scheduleId) => appendScheduled(harness.broker, journal, { scheduleId, queue: 'tier', dueAt: Date.now(), content: body, properties: { headers: {} } }, 10_000)));
    await waitFor('every wait read', () => total(writer) === before + 300, 20_000, 50);
    // The parts go nowhere: the last message of the snapshot names parts no reader can find.
    const realSend = harness.broker.sendToQueue.bind(harness.broker);
    harness.broker.sendToQueue = (queue, content, options, deadlineMs) =>
      options?.headers?.[HEADERS.entryType] === 'snapshot-part' ? Promise.resolve() : realSend(queue, content, options, deadlineMs);
    try {
      await writer.writeSnapshot();
    } finally {
      harness.broker.sendToQueue = realSend;
    }
    const reader = watch();
    await reader.start();
    expect(reader.stats.restoredFromSnapshot).toBe(0);
    await reader.waitUntilCaughtUp(10_000);
    expect(reader.waitingByQueue()).toEqual(writer.waitingByQueue());
    for (const key of keys) await appendArrived(harness.broker, journal, { key, copyId: 'c' }, 5_000);
    await waitFor('all back', () => total(reader) === before, 10_000);
  }, 60_000);
});
