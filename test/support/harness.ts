import { DeliveryRecorder } from '../../libs/delivery-log/index.js';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Dispatcher, type DispatcherSettings } from '../../apps/dispatcher/dispatcher.js';
import { BrokerConnection } from '../../libs/broker/index.js';
import { createGotClient, createUndiciClient } from '../../libs/http/index.js';
import { type Logger, silentLogger } from '../../libs/logger/index.js';
import { FileMerchantDirectory, type Merchant } from '../../libs/merchants/index.js';
import { EventPublisher } from '../../libs/publisher/index.js';
import type { RetryNet } from '../../libs/retry-net/index.js';
import { declareTopology, type TopologyNames, topologyNames } from '../../libs/topology/index.js';
import { TestBroker, brokerUrl, uniquePrefix } from './broker.js';
import { type Database, openPostgres } from '../../libs/delivery-store/index.js';
import { FailedStore } from '../../libs/failed/index.js';
import { createTestDatabase, forgetDatabase, registerDatabase, type TestDatabase } from './postgres.js';

export function testSecret(): string {
  return `whsec_${randomBytes(24).toString('base64')}`;
}

/** A merchant whose webhook points at `url`; each test breaks what it needs. */
export function testMerchant(id: string, url: string, overrides: Partial<Merchant> = {}): Merchant {
  return {
    id,
    publicKey: `pk_test_${id}_${randomBytes(8).toString('hex')}`,
    webhook: { url, enabled: true, secret: testSecret() },
    ...overrides,
  };
}

export function writeMerchantsFile(merchants: Merchant[]): string {
  const path = join(mkdtempSync(join(tmpdir(), 'merchants-')), 'merchants.json');
  writeFileSync(path, JSON.stringify({ merchants }));
  return path;
}

export interface Harness {
  prefix: string;
  merchantsFile: string;
  /** Reload it after rewriting merchantsFile to change settings mid-test. */
  merchants: FileMerchantDirectory;
  names: TopologyNames;
  dispatcher: Dispatcher;
  broker: BrokerConnection;
  publisher: EventPublisher;
  test: TestBroker;
  /** The failure index's database (the test's API uses it too). */
  database: TestDatabase;
  /** With the retryNet option only (started with the dispatcher). */
  retryNet?: RetryNet;
  close(): Promise<void>;
}

/** A dispatcher on its own topology prefix against the real broker, torn down by close(). */
export async function startHarness(options: {
  name: string;
  merchants: Merchant[];
  retryDelaysMs?: number[];
  settings?: Partial<DispatcherSettings>;
  allowPrivateTargets?: boolean;
  httpClient?: 'undici' | 'got';
  /** The retry safety net beside the dispatcher, as the program wires it (the test chooses its database). */
  retryNet?: (broker: BrokerConnection, names: TopologyNames) => RetryNet;
  /** Records every settled delivery on the deliveries stream, as the program does with DELIVERY_LOG=on. */
  deliveryLog?: boolean;
  /** The dispatcher's logger (silent by default). */
  logger?: Logger;
}): Promise<Harness> {
  const prefix = uniquePrefix(options.name);
  const retryDelaysMs = options.retryDelaysMs ?? [];
  const logger = options.logger ?? silentLogger();
  const broker = new BrokerConnection({
    url: brokerUrl(),
    name: `test-${options.name}`,
    logger,
    declare: (openChannel) => declareTopology(openChannel, { prefix, retryDelaysMs, failedRetention: '1D' }),
  });
  await broker.open(10_000);
  const merchantsFile = writeMerchantsFile(options.merchants);
  const merchants = new FileMerchantDirectory(merchantsFile, logger);
  // Test merchants listen on loopback, which production refuses (see ssrf.test.ts).
  const clientOptions = { allowPrivateTargets: options.allowPrivateTargets ?? true, responseBodyBytes: options.deliveryLog ? 1024 : 0 };
  const http = options.httpClient === 'got' ? createGotClient(clientOptions) : createUndiciClient(clientOptions);
  const names = topologyNames(prefix);
  const retryNet = options.retryNet?.(broker, names);
  // The failure index, as the program writes it: the test's API finds this prefix's database.
  const database = await createTestDatabase(options.name);
  const failuresDb: Database = openPostgres(database.url, { maxConnections: 2 });
  registerDatabase(prefix, database.url);
  const deliveryLog = options.deliveryLog ? new DeliveryRecorder(broker, logger, { prefix }) : undefined;
  await deliveryLog?.start();
  const dispatcher = new Dispatcher(
    { broker, merchants, http, logger, retryNet, deliveryLog, failures: new FailedStore(failuresDb) },
    {
      prefix,
      retryDelaysMs,
      deliveryTimeoutMs: 2_000,
      concurrency: 16,
      maxMessageBytes: 64 * 1024,
      userAgent: 'test-dispatcher',
      drainTimeoutMs: 5_000,
      ...options.settings,
    },
  );
  await dispatcher.start();
  retryNet?.start();
  const test = await TestBroker.open();
  return {
    prefix,
    merchantsFile,
    merchants,
    names,
    retryNet,
    dispatcher,
    broker,
    publisher: new EventPublisher(broker, prefix),
    test,
    database,
    async close() {
      await dispatcher.stop();
      await deliveryLog?.stop();
      await retryNet?.stop();
      await broker.close();
      http.close();
      await merchants.close();
      await test.close();
      await failuresDb.close();
      forgetDatabase(prefix);
      await database.drop();
      // A fresh connection: a broker restart in the test may have closed the first one.
      const cleanup = await TestBroker.open();
      await cleanup.deleteTopology(prefix, retryDelaysMs.length);
      await cleanup.close();
    },
  };
}
