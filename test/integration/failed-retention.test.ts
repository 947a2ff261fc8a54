import { BrokerConnection } from '../../libs/broker/index.js';
import { ENTRY_TYPES, HEADERS } from '../../libs/contracts/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { StreamRollover } from '../../libs/streams/index.js';
import { declareQueueSpec, failedSpec, topologySpec } from '../../libs/topology/index.js';
import { brokerUrl, TestBroker, uniquePrefix } from '../support/broker.js';
import { waitFor } from '../support/wait.js';

/**
 * RabbitMQ 3.10 applies a stream's x-max-age only when it opens a new segment. The failed stream's
 * small segments, filled by the dispatchers' rollover entries, keep its retention within a bound
 * however little fails: here a 2 s max age, 4 KB segments and a rollover every 500 ms.
 */
describe('the failed stream keeps its max age on a quiet deployment', () => {
  const MAX_AGE_MS = 2_000;
  const EVERY_MS = 500;
  const SEGMENT = 4_096;
  let broker: BrokerConnection;
  let test: TestBroker;
  const prefix = uniquePrefix('failedage');

  beforeAll(async () => {
    broker = new BrokerConnection({ url: brokerUrl(), name: 'test-failed-retention', logger: silentLogger() });
    await broker.open(10_000);
    test = await TestBroker.open();
  });

  afterAll(async () => {
    await test?.deleteTopology(prefix);
    await test?.close();
    await broker?.close();
  });

  it('declares the failed stream with its retention and the segment size it needs', () => {
    const failed = topologySpec({ prefix, failedRetention: '30D' }).queues.find((q) => q.name.endsWith('.failed'));
    expect(failed?.arguments).toMatchObject({ 'x-queue-type': 'stream', 'x-max-age': '30D', 'x-stream-max-segment-size-bytes': 1024 * 1024 });
  });

  it('drops an entry within the max age and two rollovers, with nothing else written', async () => {
    const spec = failedSpec(prefix, `${MAX_AGE_MS / 1000}s`, { quorumGroupSize: 1, streamClusterSize: 1 }, SEGMENT);
    await declareQueueSpec(() => broker.createChannel(), spec);
    const rollover = new StreamRollover(broker, spec.name, { bytes: SEGMENT, everyMs: EVERY_MS, logger: silentLogger() });
    try {
      await broker.sendToQueue(spec.name, Buffer.from('{"old":true}'), { headers: { [HEADERS.entryType]: ENTRY_TYPES.failure } });
      const written = Date.now();
      rollover.start();
      await waitFor(
        'the entry dropped by the retention',
        async () => (await test.readStream(spec.name, 1))[0]!.content.toString() !== '{"old":true}',
        30_000,
      );
      // The bound, with room for a loaded machine: max age + 2 rollovers + the broker's own pace.
      expect(Date.now() - written).toBeLessThan(MAX_AGE_MS + 2 * EVERY_MS + 10_000);
      const [first] = await test.readStream(spec.name, 1);
      expect(first!.properties.headers?.[HEADERS.entryType]).toBe(ENTRY_TYPES.rollover);
    } finally {
      await rollover.stop();
    }
  }, 60_000);
});
