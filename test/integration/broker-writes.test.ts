import amqp from 'amqplib';
import { coalesceWrites } from '../../libs/broker/amqplib-gaps.js';
import { brokerUrl, uniquePrefix } from '../support/broker.js';

/** The socket amqplib writes to, counting its write syscalls (one per _write, one per _writev). */
function countWrites(model: amqp.ChannelModel): { count: number } {
  const stream = (model as unknown as { connection: { stream: { _write: (...a: unknown[]) => void; _writev?: (...a: unknown[]) => void } } }).connection.stream;
  const counted = { count: 0 };
  for (const name of ['_write', '_writev'] as const) {
    const original = stream[name];
    if (!original) continue;
    stream[name] = function (this: unknown, ...args: unknown[]) {
      counted.count++;
      return original.apply(this, args);
    };
  }
  return counted;
}

describe("amqplib's frames", () => {
  it('go out in one write per turn of the event loop, not one per frame', async () => {
    const model = await amqp.connect(brokerUrl(), { noDelay: true });
    coalesceWrites(model);
    const queue = `${uniquePrefix('writes')}.q`;
    try {
      const channel = await model.createConfirmChannel();
      await channel.assertQueue(queue, { durable: false, exclusive: true });
      const writes = countWrites(model);
      // 200 publishes queued in one turn: without coalescing, 200 writes.
      for (let i = 0; i < 200; i++) channel.sendToQueue(queue, Buffer.from(`message ${i}`));
      await channel.waitForConfirms();
      expect(writes.count).toBeGreaterThan(0);
      expect(writes.count).toBeLessThanOrEqual(5);
      expect((await channel.checkQueue(queue)).messageCount).toBe(200);
    } finally {
      await model.close();
    }
  });
});
