import { type DispatcherOptions, type DispatcherProgram, startDispatcher } from '../../apps/dispatcher/program.js';
import { type Database, openPostgres } from '../../libs/delivery-store/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { EndpointSettings, MerchantSettings, PgMerchantDirectory, SecretBox } from '../../libs/merchants/index.js';
import { EventPublisher } from '../../libs/publisher/index.js';
import { TestBroker } from './broker.js';
import { TEST_SECRETS_KEY } from './dispatcher-program.js';
import { dispatcherEnv } from './operational.js';
import { createTestDatabase, type TestDatabase } from './postgres.js';
import { type Behaviour, Receiver } from './receiver.js';

/**
 * Dispatchers reading merchants from PostgreSQL, as deployed: a receiver answering `answer`, a
 * database of the test's own with the merchant directory on it (its endpoints' writes allow http and
 * loopback), the dispatchers on `prefix` and a publisher through the first.
 */
export interface DirectoryDispatchers {
  receiver: Receiver;
  db: TestDatabase;
  database: Database;
  directory: PgMerchantDirectory;
  endpoints: EndpointSettings;
  test: TestBroker;
  dispatchers: DispatcherProgram[];
  publisher: EventPublisher;
  /** The receiver first: its held requests end, so the dispatchers' drain does not wait for them. */
  close(): Promise<void>;
}

export async function startDirectoryDispatchers(options: {
  prefix: string;
  /** The test database's label. */
  name: string;
  answer: Behaviour;
  /** The dispatchers' settings beside DATABASE_URL. */
  env: Record<string, string>;
  /** How many dispatchers (1 by default). */
  count?: number;
  dispatcher?: DispatcherOptions;
}): Promise<DirectoryDispatchers> {
  const opened: Partial<DirectoryDispatchers> & { dispatchers: DispatcherProgram[] } = { dispatchers: [] };
  const close = async () => {
    await opened.receiver?.close();
    for (const dispatcher of opened.dispatchers) await dispatcher.stop();
    await opened.directory?.close();
    await opened.database?.close();
    await opened.test?.deleteTopology(options.prefix);
    await opened.test?.close();
    await opened.db?.drop();
  };
  try {
    opened.receiver = await Receiver.start(options.answer);
    const db = (opened.db = await createTestDatabase(options.name));
    const database = (opened.database = openPostgres(db.url));
    const directory = (opened.directory = new PgMerchantDirectory(database, new SecretBox(Buffer.from(TEST_SECRETS_KEY, 'base64')), silentLogger()));
    await directory.start();
    opened.endpoints = new EndpointSettings(new MerchantSettings(directory, { allowHttp: true, allowPrivateTargets: true }));
    opened.test = await TestBroker.open();
    for (let i = 0; i < (options.count ?? 1); i++) opened.dispatchers.push(await startDispatcher(dispatcherEnv(options.prefix, { DATABASE_URL: db.url, ...options.env }), silentLogger(), options.dispatcher));
    opened.publisher = new EventPublisher(opened.dispatchers[0]!.broker, options.prefix);
  } catch (err) {
    await close();
    throw err;
  }
  return { ...(opened as Omit<DirectoryDispatchers, 'close'>), close };
}
