import { loadDispatcherConfig } from '../../apps/dispatcher/config.js';
import { type DispatcherProgram, startDispatcher } from '../../apps/dispatcher/program.js';
import { loadRecorderConfig } from '../../apps/recorder/config.js';
import { type RecorderProgram, startRecorder } from '../../apps/recorder/program.js';
import { type Logger, silentLogger } from '../../libs/logger/index.js';
import { topologyNames } from '../../libs/topology/index.js';
import { brokerUrl, TestBroker } from './broker.js';
import { createTestDatabase, type TestDatabase } from './postgres.js';
import { waitFor } from './wait.js';

/** What there is before the programs start: the test's database and broker connection, and upstream's publish. */
export interface UpstreamSide {
  database: TestDatabase;
  test: TestBroker;
  /**
   * Publishes raw to upstream's events exchange, as any upstream client can: persistent JSON (a
   * Buffer or a string as it is, anything else as its JSON), once the broker confirmed it.
   */
  publish(routingKey: string, body: unknown, options?: Record<string, unknown>): Promise<void>;
}

export interface DispatcherAndRecorder extends UpstreamSide {
  program: DispatcherProgram;
  recorder: RecorderProgram;
  /** Stops both programs, deletes the topology, closes the connection and drops the database. */
  close(): Promise<void>;
}

/**
 * One dispatcher as deployed (the intake check on, waits in PostgreSQL) and the recorder, in this
 * process, on `prefix` and a test database of their own. The intake check is given 15 s: answered
 * late on a loaded machine, it would let through the repeats the tests send. The recorder starts
 * once the dispatcher made the intake key partitions (a check before then is let through). What
 * was made is undone if a step fails.
 */
export async function startDispatcherAndRecorder(options: {
  prefix: string;
  /** The test database's label. */
  database: string;
  /** Both programs' environment, over the broker, prefix, database and FAILED_RETENTION 1D. */
  env?: Record<string, string>;
  /** The dispatcher's own, over that. */
  dispatcherEnv: Record<string, string>;
  /** The dispatcher's logger (silent by default; the recorder's is). */
  logger?: Logger;
  /** A step before the dispatcher starts (nothing declared the topology yet): what the broker parked before any ran. */
  before?: (side: UpstreamSide) => Promise<void>;
}): Promise<DispatcherAndRecorder> {
  const { prefix } = options;
  const events = topologyNames(prefix).events;
  let database: TestDatabase | undefined;
  let test: TestBroker | undefined;
  let program: DispatcherProgram | undefined;
  let recorder: RecorderProgram | undefined;
  const close = async () => {
    await recorder?.stop();
    await program?.stop();
    await test?.deleteTopology(prefix);
    await test?.close();
    await database?.drop();
  };
  try {
    const db = (database = await createTestDatabase(options.database));
    const broker = (test = await TestBroker.open());
    const publish = async (routingKey: string, body: unknown, publishOptions: Record<string, unknown> = {}) => {
      const content = Buffer.isBuffer(body) ? body : Buffer.from(typeof body === 'string' ? body : JSON.stringify(body));
      const ch = await broker.connection.createConfirmChannel();
      ch.publish(events, routingKey, content, { persistent: true, contentType: 'application/json', ...publishOptions });
      await ch.waitForConfirms();
      await ch.close();
    };
    const side: UpstreamSide = { database: db, test: broker, publish };
    await options.before?.(side);
    const env = { RABBITMQ_URL: brokerUrl(), TOPOLOGY_PREFIX: prefix, DATABASE_URL: db.url, FAILED_RETENTION: '1D', ...options.env };
    program = await startDispatcher(loadDispatcherConfig({ ...env, ...options.dispatcherEnv }), options.logger ?? silentLogger(), { intakeCheck: { timeoutMs: 15_000 } });
    await waitFor('the intake key partitions', async () => (await db.query("SELECT 1 FROM pg_class WHERE relname LIKE 'intake\\_keys\\_%'")).length >= 2, 10_000);
    recorder = await startRecorder(loadRecorderConfig(env), silentLogger());
    return { ...side, program, recorder, close };
  } catch (err) {
    await close().catch(() => {});
    throw err;
  }
}
