import { seedDevMerchants } from '../../apps/dev-merchants.js';
import { BrokerConnection } from '../../libs/broker/index.js';
import { DEV_MERCHANTS_FILE } from '../../libs/config/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { BrokerMerchantDirectory, FileMerchantDirectory } from '../../libs/merchants/index.js';
import { declareTopology, topologyNames } from '../../libs/topology/index.js';
import { TestBroker, brokerUrl, uniquePrefix } from '../support/broker.js';
import { waitFor } from '../support/wait.js';

describe('development mode with MERCHANT_DIRECTORY=broker (npm start)', () => {
  const prefix = uniquePrefix('dev-merchants');
  const stream = topologyNames(prefix).merchants;
  const file = new FileMerchantDirectory(DEV_MERCHANTS_FILE, silentLogger());
  let broker: BrokerConnection;
  /** What the dispatcher sees: a directory of its own, tailing the stream. */
  let program: BrokerMerchantDirectory;

  beforeAll(async () => {
    broker = new BrokerConnection({
      url: brokerUrl(),
      name: 'test-dev-merchants',
      logger: silentLogger(),
      declare: (open) => declareTopology(open, { prefix, retryDelaysMs: [], failedRetention: '1D', merchantsStream: true }),
    });
    await broker.open(10_000);
    program = new BrokerMerchantDirectory(broker, stream, silentLogger());
    await program.start();
    await program.waitUntilReady(10_000);
  });

  afterAll(async () => {
    await program?.close();
    await broker?.close();
    const test = await TestBroker.open();
    await test.deleteTopology(prefix, 0);
    await test.channel.deleteQueue(stream).catch(() => {});
    await test.close();
  });

  it('writes the development merchants into the merchants stream with the secrets the demo merchant verifies with', async () => {
    const written = await seedDevMerchants(broker, stream, DEV_MERCHANTS_FILE, silentLogger());
    expect(written).toEqual(['m_demo', 'm_disabled']);
    await waitFor('the dispatcher sees m_demo', () => program.byId('m_demo') !== undefined, 5_000);
    expect(program.byId('m_demo')).toEqual(file.byId('m_demo'));
    expect(program.byPublicKey('pk_test_demo_0123456789')?.id).toBe('m_demo');
  });

  it('keeps a merchant already in the stream as it is on the next start (an operator may have changed it)', async () => {
    await program.update('m_demo', (current) => ({ ...current!, webhook: { ...current!.webhook!, enabled: false } }));
    const written = await seedDevMerchants(broker, stream, DEV_MERCHANTS_FILE, silentLogger());
    expect(written).toEqual([]);
    const check = new BrokerMerchantDirectory(broker, stream, silentLogger());
    await check.start();
    await check.waitUntilReady(10_000);
    expect(check.byId('m_demo')?.webhook?.enabled).toBe(false);
    await check.close();
  });
});
