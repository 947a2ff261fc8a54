import { DeliveryRecorder } from '../../libs/delivery-log/index.js';
import { randomBytes } from 'node:crypto';
import { CircuitRows } from '../../apps/dispatcher/circuit-rows.js';
import { Dispatcher, type DispatcherSettings } from '../../apps/dispatcher/dispatcher.js';
import { BrokerConnection } from '../../libs/broker/index.js';
import { createUndiciClient } from '../../libs/http/index.js';
import { type Logger, silentLogger } from '../../libs/logger/index.js';
import { type Merchant, PgMerchantDirectory, SecretBox } from '../../libs/merchants/index.js';
import { EventPublisher } from '../../libs/publisher/index.js';
import { WaitScheduler, WaitStore, WaitWriter } from '../../libs/waits/index.js';
import { OrderGate, orderingLines, OrderStore, OrderUpkeep } from '../../libs/ordering/index.js';
import { Throttle } from '../../apps/dispatcher/stages/throttle.js';
import { declareTopology, type TopologyNames, topologyNames } from '../../libs/topology/index.js';
import { TestBroker, brokerUrl, uniquePrefix } from './broker.js';
import { type Database, openPostgres } from '../../libs/delivery-store/index.js';
import { FailedStore } from '../../libs/failed/index.js';
import { createTestDatabase, forgetDatabase, registerDatabase, type TestDatabase } from './postgres.js';
import { seedMerchants, TEST_SECRETS_KEY } from './merchant-rows.js';

export function testSecret(): string {
  return `whsec_${randomBytes(24).toString('base64')}`;
}

/** A merchant whose webhook points at `url`; each test breaks what it needs. */
export function testMerchant(id: string, url: string, overrides: Partial<Merchant> = {}): Merchant {
  return {
    id,
    publicKey: `pk_test_${id}_${randomBytes(8).toString('hex')}`,
    endpoints: [{ id: `ep_${id.replace(/[^A-Za-z0-9_-]/g, '_')}_main`, url, enabled: true, secret: testSecret() }],
    ...overrides,
  };
}

/** A dispatcher's breakers following the circuits' rows, as the program wires them (started; stop() it). */
export function circuitRows(db: Database, store: WaitStore, dispatcher: Dispatcher, logger: Logger = silentLogger()): CircuitRows {
  const rows = new CircuitRows(db, store, (m, e) => dispatcher.admission.keyOfCircuit(m, e), dispatcher.guards, logger);
  rows.start();
  return rows;
}

export interface Harness {
  prefix: string;
  /** The dispatcher's directory, on the test's database. */
  merchants: PgMerchantDirectory;
  /** Writes these merchants' rows (seedMerchants) and has the directory read them: settings changed mid-test. */
  setMerchants(merchants: Merchant[]): Promise<void>;
  names: TopologyNames;
  dispatcher: Dispatcher;
  broker: BrokerConnection;
  publisher: EventPublisher;
  test: TestBroker;
  /** The failure index's database (the test's API uses it too). */
  database: TestDatabase;
  /** The waits in the test's database, and the scheduler that hands them back (started with the dispatcher). */
  waits: WaitStore;
  scheduler: WaitScheduler;
  /** With the paused option: starts consuming dispatch. */
  startDispatcher(): Promise<void>;
  close(): Promise<void>;
}

/** A dispatcher on its own topology prefix against the real broker, torn down by close(). */
export async function startHarness(options: {
  name: string;
  merchants: Merchant[];
  retryDelaysMs?: number[];
  settings?: Partial<DispatcherSettings>;
  allowPrivateTargets?: boolean;
  /** How long a hand-back of a wait may take to come to its attempt (default 60 s). */
  waitLeaseMs?: number;
  /** The dispatcher does not consume dispatch until startDispatcher() (the scheduler runs). */
  paused?: boolean;
  /** The delivery log's writer in place of the real one (a stream that loses every record). */
  recorder?: DeliveryRecorder;
  /** Records every settled delivery on the deliveries stream, as the program does with DELIVERY_LOG=on. */
  deliveryLog?: boolean;
  /** The dispatcher's logger (silent by default). */
  logger?: Logger;
  /** The dispatcher's clock (the host's by default): a host whose clock is off. */
  now?: () => Date;
  /** The endpoints' throttle, as the program has it (maxPerSecond; a 429/503 answer lowers the endpoint's rate). Off by default. */
  throttle?: boolean;
}): Promise<Harness> {
  const prefix = uniquePrefix(options.name);
  const retryDelaysMs = options.retryDelaysMs ?? [];
  const logger = options.logger ?? silentLogger();
  const broker = new BrokerConnection({
    url: brokerUrl(),
    name: `test-${options.name}`,
    logger,
    declare: (openChannel) => declareTopology(openChannel, { prefix, failedRetention: '1D' }),
  });
  await broker.open(10_000);
  // Test merchants listen on loopback, which production refuses (see ssrf.test.ts).
  const http = createUndiciClient({ allowPrivateTargets: options.allowPrivateTargets ?? true, responseBodyBytes: options.deliveryLog ? 1024 : 0 });
  const names = topologyNames(prefix);
  // The failure index, as the program writes it: the test's API finds this prefix's database.
  const database = await createTestDatabase(options.name);
  const failuresDb: Database = openPostgres(database.url, { maxConnections: 2 });
  registerDatabase(prefix, database.url);
  // The merchants, as the programs hold them: rows of the test's database, read into memory (a pool of their own, as the programs').
  const merchantsDb: Database = openPostgres(database.url, { maxConnections: 2 });
  await seedMerchants(merchantsDb, options.merchants);
  const merchants = new PgMerchantDirectory(merchantsDb, new SecretBox(Buffer.from(TEST_SECRETS_KEY, 'base64')), logger);
  await merchants.start();
  const waits = new WaitStore(failuresDb);
  const writer = new WaitWriter(waits, logger);
  // Order per reference, for merchants whose webhook has orderByReference.
  const orderStore = new OrderStore(failuresDb);
  const order = new OrderGate(orderStore, logger);
  const waitLeaseMs = options.waitLeaseMs ?? 60_000;
  const scheduler = new WaitScheduler(waits, broker, logger, { dispatch: names.dispatch, leaseMs: waitLeaseMs, pollMs: 100 });
  // As the program's: released after the lease (at least twice the delivery timeout); looked at often, for the tests' bounds.
  const upkeepBoundMs = Math.max(waitLeaseMs, 2 * (options.settings?.deliveryTimeoutMs ?? 2_000));
  const orderUpkeep = new OrderUpkeep(orderStore, () => orderingLines(merchants.list()), logger, { olderThanMs: upkeepBoundMs, everyMs: 200 });
  const deliveryLog = options.recorder ?? (options.deliveryLog ? new DeliveryRecorder(broker, logger, { prefix }) : undefined);
  await deliveryLog?.start();
  const dispatcher = new Dispatcher(
    { broker, merchants, http, logger, waits: { store: waits, writer }, order, deliveryLog, failures: new FailedStore(failuresDb), now: options.now, throttle: options.throttle ? new Throttle(failuresDb, logger) : undefined },
    {
      prefix,
      retryDelaysMs,
      deliveryTimeoutMs: 2_000,
      concurrency: 16,
      maxMessageBytes: 64 * 1024,
      userAgent: 'test-dispatcher',
      drainTimeoutMs: 5_000,
      waitLeaseMs,
      ...options.settings,
    },
  );
  const circuits = circuitRows(failuresDb, waits, dispatcher, logger);
  if (!options.paused) await dispatcher.start();
  scheduler.start();
  orderUpkeep.start();
  const test = await TestBroker.open();
  return {
    prefix,
    merchants,
    async setMerchants(changed) {
      await seedMerchants(merchantsDb, changed);
      await merchants.poll();
    },
    names,
    waits,
    scheduler,
    dispatcher,
    startDispatcher: () => dispatcher.start(),
    broker,
    publisher: new EventPublisher(broker, prefix),
    test,
    database,
    async close() {
      await dispatcher.stop();
      await circuits.stop();
      await deliveryLog?.stop();
      await scheduler.stop();
      await orderUpkeep.stop();
      writer.close();
      order.close();
      await broker.close();
      http.close();
      await merchants.close();
      await merchantsDb.close();
      await test.close();
      await failuresDb.close();
      forgetDatabase(prefix);
      await database.drop();
      // A fresh connection: a broker restart in the test may have closed the first one.
      const cleanup = await TestBroker.open();
      await cleanup.deleteTopology(prefix);
      await cleanup.close();
    },
  };
}
