import { BrokerConnection, type ConsumeOptions } from '../../libs/broker/index.js';
import { HEADERS } from '../../libs/contracts/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { ReadBacks, StreamTail } from '../../libs/streams/index.js';
import { TestBroker, brokerUrl, uniquePrefix } from '../support/broker.js';
import { waitFor } from '../support/wait.js';

/**
 * On a three-node 3.10 cluster a stream consumer stopped receiving for over a minute after the
 * stream's leader was killed, its channel and connection still open, while appends were
 * confirmed. The same silence is made here on one broker: the tail's first consumer swallows
 * what it is given from a moment on (no ack, so the broker stops at the prefetch too).
 */
function freezableConsumes(broker: BrokerConnection): { freezeFirst(): void; consumers(): number } {
  const realConsume = broker.consume.bind(broker);
  let count = 0;
  let frozen = false;
  broker.consume = (queue: string, options: ConsumeOptions) => {
    const index = count++;
    return realConsume(queue, {
      ...options,
      onMessage: (delivery) => {
        if (index === 0 && frozen) return;
        options.onMessage(delivery);
      },
    });
  };
  return { freezeFirst: () => void (frozen = true), consumers: () => count };
}

describe('a stream tail whose consumer stops receiving subscribes again', () => {
  let test: TestBroker;
  let broker: BrokerConnection;
  let stream: string;

  beforeEach(async () => {
    test = await TestBroker.open();
    stream = `${uniquePrefix('tail-stall')}.s`;
    await test.channel.assertQueue(stream, { durable: true, arguments: { 'x-queue-type': 'stream' } });
    broker = new BrokerConnection({ url: brokerUrl(), name: 'test-tail-stall', logger: silentLogger() });
    await broker.open(10_000);
  });

  afterEach(async () => {
    await broker.close();
    await test.channel.deleteQueue(stream).catch(() => {});
    await test.close();
  });

  const append = (n: number) => broker.sendToQueue(stream, Buffer.from(JSON.stringify({ n })), { headers: { 'x-test-entry': n } });

  it('when a writer does not read its entry back: every entry after is applied, once, in order', async () => {
    const gate = freezableConsumes(broker);
    const seen: number[] = [];
    let tail: StreamTail | undefined;
    const readBacks = new ReadBacks<void>(() => void tail?.verifyLive());
    tail = new StreamTail(broker, stream, silentLogger(), {
      prefetch: 10,
      idleCheckMs: 0,
      livenessDeadlineMs: 1_000,
      onEntry: (message) => {
        const n = JSON.parse(message.content.toString()).n as number;
        seen.push(n);
        readBacks.settle(String(n), undefined);
      },
    });
    await tail.start();
    try {
      for (let n = 0; n < 5; n++) await append(n);
      await waitFor('entries before the stall read', () => seen.length === 5, 10_000);

      gate.freezeFirst();
      // More than the prefetch, so the frozen consumer would also be stopped by the broker.
      for (let n = 5; n < 30; n++) await append(n);
      const readBack = readBacks.expect('29', 1_000, 'entry 29');
      await expect(readBack).rejects.toThrow('entry 29 not read back within 1000 ms');
      expect(seen).toHaveLength(5); // the stall is real: nothing came in the meantime

      await waitFor('the tail subscribed again and read what was written meanwhile', () => seen.length === 30, 15_000);
      expect(seen).toEqual(Array.from({ length: 30 }, (_, n) => n));
      expect(tail.stats.resubscribed).toBe(1);
      expect(gate.consumers()).toBe(2);
      await waitFor('caught up again', () => tail!.ready, 10_000);

      await append(30);
      await waitFor('entries after read live', () => seen.length === 31, 10_000);
    } finally {
      await tail.stop();
    }
  }, 60_000);

  it('when it has read nothing for a while: an idle tail checks itself, a live one is left alone', async () => {
    const gate = freezableConsumes(broker);
    const seen: number[] = [];
    const tail = new StreamTail(broker, stream, silentLogger(), {
      prefetch: 10,
      idleCheckMs: 300,
      livenessDeadlineMs: 1_000,
      onEntry: (message) => void seen.push(JSON.parse(message.content.toString()).n as number),
    });
    await tail.start();
    try {
      await append(0);
      await waitFor('entry read', () => seen.length === 1, 10_000);
      // Several idle checks pass on a live consumer: none of them subscribes again.
      const entries = await test.readStream(stream, 6, 15_000); // the catch-up checkpoint, entry 0, idle checks
      expect(entries.filter((e) => e.properties.headers?.[HEADERS.entryType] === 'checkpoint').length).toBeGreaterThanOrEqual(5);
      expect(tail.stats.resubscribed).toBe(0);
      expect(seen).toEqual([0]);

      gate.freezeFirst();
      await append(1);
      await waitFor('the idle check subscribed again', () => seen.length === 2, 15_000);
      expect(seen).toEqual([0, 1]);
      expect(tail.stats.resubscribed).toBe(1);
    } finally {
      await tail.stop();
    }
  }, 60_000);
});
