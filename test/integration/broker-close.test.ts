import { BrokerConnection } from '../../libs/broker/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { TestBroker, brokerUrl, uniquePrefix } from '../support/broker.js';
import { TEST_SECRETS_KEY } from '../support/merchant-rows.js';
import { FrozenProxy } from '../support/frozen-proxy.js';
import { useTestDatabase } from '../support/postgres.js';
import { finishedWithin, startProgram } from '../support/process.js';
import { waitFor } from '../support/wait.js';

describe('closing against a broker that misbehaves', () => {
  const own = useTestDatabase('broker_close');
  let test: TestBroker;

  beforeAll(async () => {
    test = await TestBroker.open();
  });

  afterAll(async () => {
    await test.close();
  });

  it('keeps its connection when RabbitMQ answers a consumer cancel twice because the queue is deleted meanwhile', async () => {
    // RabbitMQ 3.10 sends two basic.cancel-ok when a quorum queue is deleted while the cancel is in
    // flight (about one try in two with no delay between them); amqplib 2.3 then throws "reply is
    // not a function" out of its frame loop and drops the connection.
    const broker = new BrokerConnection({ url: brokerUrl(), name: 'test-double-cancel-ok', logger: silentLogger() });
    let disconnects = 0;
    broker.on('disconnected', () => disconnects++);
    await broker.open(10_000);
    try {
      for (let round = 0; round < 20; round++) {
        const queue = `${uniquePrefix('cancel')}.q`;
        await test.channel.assertQueue(queue, { durable: true, arguments: { 'x-queue-type': 'quorum' } });
        const consumer = await broker.consume(queue, { prefetch: 1, onMessage: (delivery) => delivery.ack() });
        const ch = await test.connection.createChannel();
        const deleted = ch.deleteQueue(queue);
        await consumer.cancel();
        await deleted;
        await ch.close();
      }
      // A dropped connection would show by now: the close event comes with the offending frame.
      await new Promise((resolve) => setImmediate(resolve));
      expect(disconnects).toBe(0);
      expect(broker.isConnected).toBe(true);
    } finally {
      await broker.close();
    }
  });

  it('closes within its deadline when the broker stops answering', async () => {
    const proxy = await FrozenProxy.start(brokerUrl());
    const stream = `${uniquePrefix('frozen')}.s`;
    await test.channel.assertQueue(stream, { durable: true, arguments: { 'x-queue-type': 'stream' } });
    const broker = new BrokerConnection({ url: proxy.url, name: 'test-frozen', logger: silentLogger() });
    try {
      await broker.open(10_000);
      const consumer = await broker.consume(stream, { prefetch: 10, arguments: () => ({ 'x-stream-offset': 'first' }), onMessage: (d) => d.ack() });
      proxy.freeze();
      const started = Date.now();
      await consumer.cancel();
      await broker.close(1_000);
      // The cancel waits its own bound (2 s), the close its deadline: never the 30 s of a heartbeat timeout.
      expect(Date.now() - started).toBeLessThan(3_500);
    } finally {
      await broker.close();
      await proxy.close();
      await test.channel.deleteQueue(stream).catch(() => {});
    }
  });

  it('exits 0 at once on SIGTERM while its queues are being deleted', async () => {
    for (let round = 0; round < 5; round++) {
      const prefix = uniquePrefix('sigterm-delete');
      const program = startProgram('dist/apps/dispatcher/main.js', {
        RABBITMQ_URL: brokerUrl(),
        TOPOLOGY_PREFIX: prefix,
        DATABASE_URL: own.db.url,
        SECRETS_KEY: TEST_SECRETS_KEY,
        RETRY_SCHEDULE: '',
        METRICS_PORT: '0',
        LOG_LEVEL: 'info',
      });
      try {
        await waitFor('dispatcher consuming', () => program.output.stdout.includes('dispatcher consuming'), 15_000);
        const signalledAt = Date.now();
        setTimeout(() => program.child.kill('SIGTERM'), round);
        await test.deleteTopology(prefix);
        const result = await finishedWithin(program, 10_000);
        expect(result).toBeDefined();
        expect(Date.now() - signalledAt).toBeLessThan(5_000);
        expect(result!.code).toBe(0);
        expect(result!.stdout).not.toContain('reply is not a function');
      } finally {
        if (program.child.exitCode === null) program.child.kill('SIGKILL');
        await test.deleteTopology(prefix);
      }
    }
  }, 120_000);
});
