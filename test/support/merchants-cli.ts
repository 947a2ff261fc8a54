import { BrokerConnection } from '../../libs/broker/index.js';
import { type Database, openPostgres } from '../../libs/delivery-store/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { PgMerchantDirectory, SecretBox } from '../../libs/merchants/index.js';
import { declareTopology } from '../../libs/topology/index.js';
import { TestBroker, brokerUrl, uniquePrefix } from './broker.js';
import { TEST_SECRETS_KEY } from './dispatcher-program.js';
import { createTestDatabase, type TestDatabase } from './postgres.js';
import { runCliInProcess } from './cli.js';
import type { Finished } from './process.js';

/** The operator CLI's `webhooks merchants …` on a merchants table of its own, and a running program's view of it. */
export interface MerchantsCli {
  /** The topology prefix of the file (its operational exchange). */
  readonly prefix: string;
  /** The CLI's environment (DATABASE_URL set once the database is made). */
  readonly env: Record<string, string>;
  readonly db: TestDatabase;
  /** What a running program sees: a directory of its own, kept current by NOTIFY. */
  readonly program: PgMerchantDirectory;
  /** `webhooks merchants <args>`. */
  cli(...args: string[]): Promise<Finished>;
}

/**
 * Registers the fixture of a test file on the merchants CLI (beforeAll / afterAll): a topology
 * prefix and a database named after `name`, the operational exchange the CLI announces on (as the
 * programs declare it), and a PgMerchantDirectory started on the database. `env` adds to the CLI's.
 */
export function merchantsCli(name: string, env: Record<string, string> = {}): MerchantsCli {
  const prefix = uniquePrefix(name);
  const cliEnv: Record<string, string> = { RABBITMQ_URL: brokerUrl(), TOPOLOGY_PREFIX: prefix, SECRETS_KEY: TEST_SECRETS_KEY, ...env };
  let broker: BrokerConnection | undefined;
  let db: TestDatabase | undefined;
  let database: Database | undefined;
  let program: PgMerchantDirectory | undefined;

  beforeAll(async () => {
    db = await createTestDatabase(name.replace(/-/g, '_'));
    cliEnv.DATABASE_URL = db.url;
    broker = new BrokerConnection({ url: brokerUrl(), name: `test-${name}`, logger: silentLogger(), declare: (open) => declareTopology(open, { prefix, failedRetention: '1D' }) });
    await broker.open(10_000);
    database = openPostgres(db.url);
    program = new PgMerchantDirectory(database, new SecretBox(Buffer.from(TEST_SECRETS_KEY, 'base64')), silentLogger());
    await program.start();
  });

  afterAll(async () => {
    await program?.close();
    await database?.close();
    await broker?.close();
    const test = await TestBroker.open();
    await test.deleteTopology(prefix);
    await test.close();
    await db?.drop();
  });

  return {
    prefix,
    env: cliEnv,
    get db() {
      return db!;
    },
    get program() {
      return program!;
    },
    async cli(...args: string[]) {
      const result = await runCliInProcess(cliEnv, ['merchants', ...args]);
      // Exit 1 is an unexpected error: say which, so that a failure under load can be read from the log.
      if (result.code === 1) console.log(`webhooks merchants ${args.join(' ')} exited 1: ${result.stderr}`);
      return result;
    },
  };
}
