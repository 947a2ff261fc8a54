import { Writable } from 'node:stream';
import winston from 'winston';
import { loadDispatcherConfig } from '../../apps/dispatcher/config.js';
import { type DispatcherProgram, startDispatcher } from '../../apps/dispatcher/program.js';
import { BrokerConnection } from '../../libs/broker/index.js';
import { HEADERS, JOURNAL_ENTRY_TYPES, sampleEvent } from '../../libs/contracts/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { EventPublisher } from '../../libs/publisher/index.js';
import { declareTopology, topologyNames } from '../../libs/topology/index.js';
import { brokerUrl, TestBroker, uniquePrefix } from '../support/broker.js';
import { testMerchant, writeMerchantsFile } from '../support/harness.js';
import { Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

/** A logger that keeps each line's message and when it was written. */
function recordingLogger(lines: Array<{ message: string; at: number }>): winston.Logger {
  const sink = new Writable({
    objectMode: true,
    write(info: { message: string }, _encoding, done) {
      lines.push({ message: info.message, at: Date.now() });
      done();
    },
  });
  return winston.createLogger({ level: 'info', transports: [new winston.transports.Stream({ stream: sink })] });
}

describe('a dispatcher starting', () => {
  const prefix = uniquePrefix('retry-start');
  const names = topologyNames(prefix);
  const merchant = testMerchant('m_start', 'http://placeholder');
  let receiver: Receiver;
  let program: DispatcherProgram | undefined;
  let test: TestBroker;

  beforeAll(async () => {
    receiver = await Receiver.start(() => 204);
    merchant.webhook!.url = receiver.url;
    test = await TestBroker.open();
  });

  afterAll(async () => {
    await program?.stop();
    await receiver?.close();
    await test.deleteTopology(prefix, 1);
    await test.close();
  });

  it('takes no delivery before it has read the retries journal up to date, and is ready after', async () => {
    const broker = new BrokerConnection({
      url: brokerUrl(),
      name: 'test-retry-start',
      logger: silentLogger(),
      declare: (openChannel) => declareTopology(openChannel, { prefix, retryDelaysMs: [1_000], failedRetention: '1D' }),
    });
    await broker.open(10_000);
    try {
      // A journal that takes a moment to read (no snapshot yet), and an event already waiting.
      const channel = await test.connection.createConfirmChannel();
      for (let i = 0; i < 40_000; i++) {
        const headers = { [HEADERS.entryType]: JOURNAL_ENTRY_TYPES.arrived, [HEADERS.scheduleId]: `old-${i}`, [HEADERS.copyId]: 'c' };
        if (!channel.sendToQueue(names.retries, Buffer.from('{}'), { headers })) await new Promise((resolve) => channel.once('drain', resolve));
      }
      await channel.waitForConfirms();
      await channel.close();
      await new EventPublisher(broker, prefix).publish(sampleEvent('payout', merchant.id));
    } finally {
      await broker.close();
    }

    const lines: Array<{ message: string; at: number }> = [];
    const config = loadDispatcherConfig({
      RABBITMQ_URL: brokerUrl(),
      TOPOLOGY_PREFIX: prefix,
      MERCHANTS_FILE: writeMerchantsFile([merchant]),
      RETRY_SCHEDULE: '1s',
      ALLOW_PRIVATE_TARGETS: 'true',
      METRICS_PORT: '0',
      FAILED_RETENTION: '1D',
    });
    program = await startDispatcher(config, recordingLogger(lines));
    await receiver.waitForRequests(1);
    const caughtUp = lines.find((line) => line.message === 'retries journal caught up');
    expect(caughtUp).toBeDefined();
    expect(receiver.requests[0]!.at).toBeGreaterThanOrEqual(caughtUp!.at);
    await waitFor('ready', async () => (await fetch(`http://127.0.0.1:${program!.metricsPort}/readyz`)).status === 200, 5_000);
  }, 60_000);
});
