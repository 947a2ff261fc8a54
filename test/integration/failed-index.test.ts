import { BrokerConnection, BrokerUnavailableError } from '../../libs/broker/index.js';
import { ENTRY_TYPES, HEADERS } from '../../libs/contracts/index.js';
import { EntrySpool, FailedIndex, readEntryAt } from '../../libs/failed/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { TestBroker, brokerUrl, uniquePrefix } from '../support/broker.js';
import { waitFor } from '../support/wait.js';

describe('the failed index keeps itself right', () => {
  let test: TestBroker;
  let broker: BrokerConnection;
  const streams: string[] = [];

  beforeAll(async () => {
    test = await TestBroker.open();
    broker = new BrokerConnection({ url: brokerUrl(), name: 'test-failed-index', logger: silentLogger() });
    await broker.open(10_000);
  });

  afterAll(async () => {
    await broker.close();
    for (const stream of streams) await test.channel.deleteQueue(stream).catch(() => {});
    await test.close();
  });

  async function stream(args: Record<string, unknown> = {}): Promise<string> {
    const name = `${uniquePrefix('index')}.failed`;
    streams.push(name);
    await test.channel.assertQueue(name, { durable: true, arguments: { 'x-queue-type': 'stream', ...args } });
    return name;
  }

  function failure(stream: string, i: number, merchantId = 'm_index', padding = 0): Promise<void> {
    return test.publishRaw(stream, Buffer.alloc(padding + 2, 'x'), {
      messageId: `evt_${i}`,
      headers: {
        [HEADERS.entryType]: ENTRY_TYPES.failure,
        [HEADERS.merchantId]: merchantId,
        [HEADERS.reference]: `ref_${i}`,
        [HEADERS.webhookId]: `evt_${i}`,
      },
    });
  }

  it('becomes ready by itself when its checkpoint append fails, retrying with backoff', async () => {
    const name = await stream();
    await failure(name, 1);
    let checkpoints = 0;
    // The first checkpoint publish fails as a broker nack would; nothing reconnects afterwards.
    const flaky = new Proxy(broker, {
      get(target, prop, receiver) {
        if (prop === 'sendToQueue') {
          return (...args: unknown[]) =>
            ++checkpoints === 1
              ? Promise.reject(new BrokerUnavailableError('publish was not confirmed'))
              : (target.sendToQueue as (...a: unknown[]) => Promise<void>).apply(target, args);
        }
        const value = Reflect.get(target, prop, receiver);
        return typeof value === 'function' ? value.bind(target) : value;
      },
    }) as BrokerConnection;
    const index = new FailedIndex(flaky, name, silentLogger(), { checkpointRetryMs: [100] });
    try {
      await index.start();
      expect(index.ready).toBe(false);
      await waitFor('ready after the retried checkpoint', () => index.ready, 5_000);
      expect(checkpoints).toBe(2);
      expect(index.lookup('m_index', 'ref_1')).toHaveLength(1);
    } finally {
      await index.stop();
    }
  });

  it('drops entries that retention removed from the stream, and its size follows', async () => {
    // Retention removes whole segments: tiny segments and a 1 s max age make it happen in a test.
    const name = await stream({ 'x-max-age': '1s', 'x-stream-max-segment-size-bytes': 2_000 });
    for (let i = 0; i < 10; i++) await failure(name, i, 'm_index', 500);
    const index = new FailedIndex(broker, name, silentLogger(), { retentionCheckMs: 200 });
    try {
      await index.start();
      await waitFor('ready', () => index.ready);
      expect(index.size).toBe(10);
      // Wait past the max age, then write on so that new segments roll and old ones are deleted.
      const old = Date.now();
      await waitFor('max age passed', () => Date.now() - old > 1_500, 5_000);
      for (let i = 10; i < 20; i++) await failure(name, i, 'm_index', 500);
      await waitFor('expired entries dropped', () => index.lookup('m_index', 'ref_0').length === 0, 15_000, 100);
      expect(index.size).toBeLessThan(20);
      expect(index.lookup('m_index', 'ref_19')).toHaveLength(1);
    } finally {
      await index.stop();
    }
  });

  it('serves each failure entry from its spool as the stream holds it, and nothing the stream no longer has', async () => {
    const name = await stream();
    for (let i = 0; i < 40; i++) {
      await test.publishRaw(name, Buffer.from(JSON.stringify({ i, text: 'é'.repeat(i) })), {
        messageId: `evt_${i}`,
        contentType: 'application/json',
        timestamp: 1_700_000_000 + i,
        headers: {
          [HEADERS.entryType]: ENTRY_TYPES.failure,
          [HEADERS.merchantId]: 'm_spool',
          [HEADERS.reference]: `ref_${i}`,
          [HEADERS.webhookId]: `evt_${i}`,
          'x-bytes': Buffer.from([i, 255]),
          'x-count': i,
        },
      });
    }
    const spool = new EntrySpool({ maxBytes: 8 * 1024 * 1024 });
    const index = new FailedIndex(broker, name, silentLogger(), { spool });
    await index.start();
    try {
      await waitFor('the index to hold 40 entries', () => index.size === 40, 10_000);
      for (let i = 0; i < 40; i++) {
        const [offset] = index.lookup('m_spool', `ref_${i}`);
        const fromStream = await readEntryAt(broker, name, offset!);
        const spooled = await index.spooledEntryAt(offset!);
        expect(spooled?.content).toEqual(fromStream.content);
        expect(spooled?.properties).toEqual(fromStream.properties);
      }
      // A resolved entry is not offered any more, although its bytes are still on disk.
      const [first] = index.lookup('m_spool', 'ref_0');
      index.resolve({ merchantId: 'm_spool', resolved: [{ offset: first!, references: ['ref_0'] }] });
      expect(await index.spooledEntryAt(first!)).toBeUndefined();
    } finally {
      await index.stop();
    }
  });
});
