import { randomBytes } from 'node:crypto';
import amqp, { type Channel, type ChannelModel, type ConsumeMessage, type GetMessage } from 'amqplib';
import { topologyNames } from '../../libs/topology/index.js';
import { waitFor } from './wait.js';

export function brokerUrl(): string {
  const url = process.env.RABBITMQ_URL;
  if (!url) throw new Error('RABBITMQ_URL is not set: the global setup should have set it');
  return url;
}

/** A topology prefix of this test file's own, so parallel files never share a queue. */
export function uniquePrefix(name: string): string {
  return `test.${name}.${randomBytes(4).toString('hex')}`;
}

/** A plain amqplib connection for the test's own inspection of queues and streams. */
export class TestBroker {
  private constructor(readonly connection: ChannelModel, readonly channel: Channel) {}

  static async open(): Promise<TestBroker> {
    const connection = await amqp.connect(brokerUrl());
    const channel = await connection.createChannel();
    return new TestBroker(connection, channel);
  }

  async messageCount(queue: string): Promise<number> {
    const ch = await this.connection.createChannel();
    ch.on('error', () => {});
    try {
      return (await ch.checkQueue(queue)).messageCount;
    } finally {
      await ch.close().catch(() => {});
    }
  }

  /** Takes every message now in a queue (acked), waiting until at least `atLeast` arrived. */
  async drain(queue: string, atLeast = 1, timeoutMs = 10_000): Promise<GetMessage[]> {
    const got: GetMessage[] = [];
    await waitFor(`${atLeast} message(s) in ${queue}`, async () => {
      for (;;) {
        const msg = await this.channel.get(queue, { noAck: true });
        if (!msg) break;
        got.push(msg);
      }
      return got.length >= atLeast;
    }, timeoutMs);
    return got;
  }

  /** Reads a stream from its first offset until `count` entries arrived. */
  async readStream(stream: string, count: number, timeoutMs = 10_000): Promise<ConsumeMessage[]> {
    const ch = await this.connection.createChannel();
    await ch.prefetch(1000);
    const entries: ConsumeMessage[] = [];
    const { consumerTag } = await ch.consume(
      stream,
      (msg) => {
        if (!msg) return;
        entries.push(msg);
        ch.ack(msg);
      },
      { noAck: false, arguments: { 'x-stream-offset': 'first' } },
    );
    try {
      await waitFor(`${count} entries in stream ${stream}`, () => entries.length >= count, timeoutMs);
      return entries;
    } finally {
      await ch.cancel(consumerTag).catch(() => {});
      await ch.close().catch(() => {});
    }
  }

  async publishRaw(queue: string, content: Buffer, options: amqp.Options.Publish = {}): Promise<void> {
    const ch = await this.connection.createConfirmChannel();
    ch.sendToQueue(queue, content, { persistent: true, ...options });
    await ch.waitForConfirms();
    await ch.close();
  }

  /**
   * Takes what `queue` holds and returns it (nack, requeue) until the broker parks it in `invalid`
   * (dispatch's delivery limit), `parked` messages there: as when each dispatcher holding it dies.
   */
  async returnUntilParked(queue: string, invalid: string, parked = 1, timeoutMs = 10_000): Promise<void> {
    const ch = await this.connection.createChannel();
    try {
      await waitFor(`the broker parks ${parked} in ${invalid}`, async () => {
        const message = await ch.get(queue, { noAck: false });
        if (message) ch.nack(message, false, true);
        return (await this.messageCount(invalid)) === parked;
      }, timeoutMs, 5);
    } finally {
      await ch.close().catch(() => {});
    }
  }

  /** Deletes everything a prefix declared. */
  async deleteTopology(prefix: string): Promise<void> {
    const names = topologyNames(prefix);
    const queues = [names.dispatch, names.failed, names.invalid, names.deliveries];
    for (const queue of queues) {
      const ch = await this.connection.createChannel();
      ch.on('error', () => {});
      await ch.deleteQueue(queue).catch(() => {});
      await ch.close().catch(() => {});
    }
    const ch = await this.connection.createChannel();
    ch.on('error', () => {});
    await ch.deleteExchange(names.events).catch(() => {});
    await ch.close().catch(() => {});
    const operational = await this.connection.createChannel();
    operational.on('error', () => {});
    await operational.deleteExchange(names.operational).catch(() => {});
    await operational.close().catch(() => {});
  }

  async close(): Promise<void> {
    await this.connection.close().catch(() => {});
  }
}

/** Deletes what a prefix declared, on a connection of its own: a test's cleanup after its programs stopped. */
export async function deleteTopologyOf(prefix: string): Promise<void> {
  const test = await TestBroker.open();
  try {
    await test.deleteTopology(prefix);
  } finally {
    await test.close();
  }
}
