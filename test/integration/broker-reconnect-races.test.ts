import { BrokerConnection, type Consumer } from '../../libs/broker/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { within } from '../../libs/runtime/timers.js';
import { CLOSE_STEP_MS } from '../../libs/broker/timing.js';
import { declareTopology, TopologyMismatchError, topologyNames, topologySpec } from '../../libs/topology/index.js';
import { brokerUrl, TestBroker, uniquePrefix } from '../support/broker.js';
import { FrozenProxy } from '../support/frozen-proxy.js';
import { waitFor } from '../support/wait.js';

/** What a reconnect (the connection cut under the program, through a proxy of the test's own) races with. */
describe('a broker connection that reconnects', () => {
  const prefix = uniquePrefix('reconnect-races');
  let test: TestBroker;
  let proxy: FrozenProxy;

  beforeAll(async () => {
    test = await TestBroker.open();
    proxy = await FrozenProxy.start(brokerUrl());
  });

  afterAll(async () => {
    await proxy.close();
    await test.close();
  });

  it('does not resume a consumer cancelled while the reconnect was starting it (a stop during a broker restart)', async () => {
    const queue = `${prefix}.cancel-during-setup`;
    await test.channel.assertQueue(queue, { durable: true, arguments: { 'x-queue-type': 'quorum' } });
    const broker = new BrokerConnection({ url: proxy.url, name: 'test-cancel-during-setup', logger: silentLogger() });
    try {
      await broker.open(10_000);
      let consumer: Consumer | undefined;
      let starts = 0;
      let cancelled: Promise<void> | undefined;
      consumer = await broker.consume(queue, {
        prefetch: 10,
        // Asked for at each start, just before its basic.consume: the stop comes in the middle of the reconnect's.
        arguments: () => {
          if (++starts === 2) cancelled = consumer!.cancel();
          return {};
        },
        onMessage: () => {},
      });
      const reconnected = new Promise((resolve) => broker.once('connected', resolve));
      proxy.cut();
      await reconnected;
      expect(cancelled).toBeDefined();
      await cancelled;
      // Cancelled, the queue has no consumer: none would take its messages while the program stops.
      expect((await test.channel.checkQueue(queue)).consumerCount).toBe(0);
    } finally {
      await broker.close();
      await test.channel.deleteQueue(queue).catch(() => {});
    }
  });

  it('cancels a consumer whose restart outlived the wait of its cancel (a consume held up by a leader election), and sends it nothing', async () => {
    const queue = `${prefix}.cancel-outlived`;
    await test.channel.assertQueue(queue, { durable: true, arguments: { 'x-queue-type': 'quorum' } });
    const broker = new BrokerConnection({ url: proxy.url, name: 'test-cancel-outlived', logger: silentLogger() });
    try {
      await broker.open(10_000);
      let consumer: Consumer | undefined;
      let starts = 0;
      let cancelled: Promise<void> | undefined;
      const handled: string[] = [];
      consumer = await broker.consume(queue, {
        prefetch: 10,
        arguments: () => {
          if (++starts === 2) {
            cancelled = consumer!.cancel();
            // The restart's basic.consume goes out only after cancel() has stopped waiting for it.
            const until = performance.now() + CLOSE_STEP_MS + 300;
            while (performance.now() < until);
          }
          return {};
        },
        onMessage: (delivery) => void handled.push(delivery.message.content.toString()),
      });
      const reconnected = new Promise((resolve) => broker.once('connected', resolve));
      proxy.cut();
      await reconnected;
      await cancelled;
      await test.channel.sendToQueue(queue, Buffer.from('after the stop'));
      await waitFor('the queue without a consumer, its message ready', async () => {
        const { consumerCount, messageCount } = await test.channel.checkQueue(queue);
        return consumerCount === 0 && messageCount === 1;
      }, 5_000);
      expect(handled).toEqual([]);
    } finally {
      await broker.close();
      await test.channel.deleteQueue(queue).catch(() => {});
    }
  });

  it("says while RabbitMQ blocks the connection (a memory or disk alarm), and forgets it when unblocked or reconnected", async () => {
    const broker = new BrokerConnection({ url: proxy.url, name: 'test-blocked', logger: silentLogger() });
    try {
      await broker.open(10_000);
      const model = () => (broker as unknown as { current: import('node:events').EventEmitter }).current;
      expect(broker.blocked).toBeUndefined();
      // What amqplib emits on connection.blocked and connection.unblocked.
      model().emit('blocked', 'low on memory');
      expect([broker.isConnected, broker.blocked]).toEqual([true, 'low on memory']);
      model().emit('unblocked');
      expect(broker.blocked).toBeUndefined();
      model().emit('blocked', 'low on disk');
      const reconnected = new Promise((resolve) => broker.once('connected', resolve));
      proxy.cut();
      await reconnected;
      expect(broker.blocked).toBeUndefined();
    } finally {
      await broker.close();
    }
  });

  it('leaves no consumer behind when its consume is refused: the connection comes back, without it', async () => {
    const missing = `${prefix}.never-declared`;
    const broker = new BrokerConnection({ url: brokerUrl(), name: 'test-consume-refused', logger: silentLogger() });
    let reconnects = 0;
    try {
      await broker.open(10_000);
      broker.on('connected', () => reconnects++);
      // A 404 closes the channel; its close reconnects, as for any channel the broker closed.
      await expect(broker.consume(missing, { prefetch: 1, onMessage: () => {} })).rejects.toThrow(/NOT_FOUND/);
      // The caller holds nothing to cancel: a reconnect that started it again would fail for it each time.
      await waitFor('the connection back', () => reconnects > 0 && broker.isConnected, 10_000);
    } finally {
      await broker.close();
    }
  });

  it('says that a reconnect met what reconnecting cannot fix, however late a program still starting asks', async () => {
    const options = { prefix: `${prefix}.refused`, failedRetention: '1D' };
    const failed = topologySpec(options).queues.find((queue) => queue.name === topologyNames(options.prefix).failed)!;
    const broker = new BrokerConnection({
      url: proxy.url, name: 'test-refused-at-reconnect', logger: silentLogger(),
      declare: (openChannel) => declareTopology(openChannel, options),
    });
    try {
      await broker.open(10_000);
      // While the program is away, the failed stream is made again with another retention.
      await test.channel.deleteQueue(failed.name);
      await test.channel.assertQueue(failed.name, { durable: true, arguments: { ...failed.arguments, 'x-max-age': '2D' } });
      const refusedNow = new Promise((resolve) => broker.once('fatal', resolve));
      proxy.cut();
      await refusedNow;
      // Asked after it came (the program's start-up still loading its merchants then): not missed.
      expect(await within(1_000, broker.refused)).toBeInstanceOf(TopologyMismatchError);
    } finally {
      await broker.close();
      await test.deleteTopology(options.prefix);
    }
  });
});
