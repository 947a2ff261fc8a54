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
import { waitFor } from './wait.js';

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
  /**
   * A merchant with one endpoint: `merchants set <id> --public-key <key>`, then `merchants endpoints
   * add <id> <addArgs>` (--url …); answers the add (its stdout holds the endpoint id and secret).
   */
  withEndpoint(id: string, publicKey: string, ...addArgs: string[]): Promise<Finished>;
  /** The id of the merchant's first endpoint, once the running program holds it. */
  firstEndpoint(id: string): Promise<string>;
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

  const cli = async (...args: string[]): Promise<Finished> => {
    const result = await runCliInProcess(cliEnv, ['merchants', ...args]);
    // Exit 1 is an unexpected error: say which, so that a failure under load can be read from the log.
    if (result.code === 1) console.log(`webhooks merchants ${args.join(' ')} exited 1: ${result.stderr}`);
    return result;
  };

  return {
    prefix,
    env: cliEnv,
    get db() {
      return db!;
    },
    get program() {
      return program!;
    },
    cli,
    async withEndpoint(id, publicKey, ...addArgs) {
      const set = await cli('set', id, '--public-key', publicKey);
      if (set.code !== 0) return set;
      return cli('endpoints', 'add', id, ...addArgs);
    },
    firstEndpoint(id) {
      return waitFor(`the program holds ${id}'s endpoint`, () => program?.byId(id)?.endpoints[0]?.id, 15_000);
    },
  };
}
