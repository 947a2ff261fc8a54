import { BrokerConnection } from '../../libs/broker/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { declareTopology, TopologyMismatchError, topologyNames, topologySpec } from '../../libs/topology/index.js';
import { TestBroker, brokerUrl, uniquePrefix } from '../support/broker.js';

/**
 * Replication arguments only shape a queue when it is created. RabbitMQ 3.10 still compares them
 * on every declaration (406 "inequivalent arg"), so a deployment from before they existed, or
 * one that changed QUORUM_GROUP_SIZE, must keep starting.
 */
describe('replication settings on queues that already exist', () => {
  const prefix = uniquePrefix('replication');
  const names = topologyNames(prefix);
  const options = { prefix, failedRetention: '1D' };
  let test: TestBroker;

  beforeAll(async () => {
    test = await TestBroker.open();
  });

  afterEach(async () => {
    await test.deleteTopology(prefix);
  });

  afterAll(async () => {
    await test.close();
  });

  /** Declares the topology as an older version did: every argument but the replication ones. */
  async function declareAsBefore(change: (args: Record<string, unknown>, name: string) => void = () => {}): Promise<void> {
    const spec = topologySpec(options);
    await test.channel.assertExchange(spec.exchange.name, 'topic', { durable: true });
    for (const queue of spec.queues) {
      const args: Record<string, unknown> = { ...queue.arguments };
      delete args['x-quorum-initial-group-size'];
      delete args['x-initial-cluster-size'];
      change(args, queue.name);
      await test.channel.assertQueue(queue.name, { durable: true, arguments: args });
    }
  }

  function connect(replication = { quorumGroupSize: 3, streamClusterSize: 3 }): BrokerConnection {
    return new BrokerConnection({
      url: brokerUrl(),
      name: 'replication-test',
      logger: silentLogger(),
      declare: (openChannel) => declareTopology(openChannel, { ...options, replication }),
    });
  }

  it('starts on queues declared without replication arguments, and keeps them', async () => {
    await declareAsBefore();
    const broker = connect();
    await broker.open(10_000);
    await broker.close();
    expect(await test.messageCount(names.dispatch)).toBe(0);
  });

  it('starts on queues created with another group size', async () => {
    const first = connect({ quorumGroupSize: 1, streamClusterSize: 1 });
    await first.open(10_000);
    await first.close();
    const broker = connect({ quorumGroupSize: 5, streamClusterSize: 5 });
    await broker.open(10_000);
    await broker.close();
  });

  it('still refuses a queue whose other arguments differ (a changed failed retention)', async () => {
    await declareAsBefore((args, name) => {
      if (name === names.failed) args['x-max-age'] = '2D';
    });
    const error = await connect().open(10_000).catch((err: unknown) => err);
    expect(error).toBeInstanceOf(TopologyMismatchError);
    expect((error as TopologyMismatchError).entity).toBe(`stream ${names.failed}`);
  });
});

describe('a list of broker URLs', () => {
  it('connects through the first node that answers, and names the node in the connection', async () => {
    const dead = 'amqp://guest:guest@127.0.0.1:1';
    const broker = new BrokerConnection({ url: [dead, brokerUrl(), dead], name: 'url-list-test', logger: silentLogger() });
    try {
      await broker.open(15_000);
      expect(broker.isConnected).toBe(true);
      expect(broker.node).toBe(`${new URL(brokerUrl()).hostname}:${new URL(brokerUrl()).port || '5672'}`);
    } finally {
      await broker.close();
    }
  });
});
