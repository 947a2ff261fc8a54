/**
 * The dispatcher waits for RabbitMQ and for the database (its schema, then its merchant directory)
 * side by side. When one of the two gives up, the other wait ends with it: the built program exits
 * 1 within that first deadline, naming that first cause, with nothing more on stderr (no unhandled
 * rejection, no stack), instead of lingering in the other wait and exiting later with its message.
 */
import { TEST_SECRETS_KEY } from '../support/dispatcher-program.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';
import { finishedWithin, startProgram } from '../support/process.js';
import { freePort } from '../support/receiver.js';
import { uniquePrefix } from '../support/broker.js';
import { REQUIRED_VERSION } from '../../libs/migrations/index.js';

/**
 * RabbitMQ's start-up deadline (BROKER_START_DEADLINE_MS, 30 s) plus a loaded machine's node start
 * and close (up to some 10 s each), and well short of the schema's 120 s (SCHEMA_WAIT_MS), where a
 * program that waited the schema out would exit.
 */
const EXIT_BOUND_MS = 75_000;

describe('dispatcher start-up with RabbitMQ never answering', () => {
  const prefix = uniquePrefix('start-give-up');
  const made: TestDatabase[] = [];
  const running: Array<ReturnType<typeof startProgram>> = [];

  afterAll(async () => {
    for (const program of running) if (program.child.exitCode === null) program.child.kill('SIGKILL');
    for (const db of made) await db.drop();
  });

  /** A dispatcher as deployed (merchants in PostgreSQL), its RABBITMQ_URL a port nothing listens on. */
  const start = async (databaseUrl: string) => {
    const program = startProgram('dist/apps/dispatcher/main.js', {
      RABBITMQ_URL: `amqp://guest:guest@127.0.0.1:${await freePort()}`,
      TOPOLOGY_PREFIX: prefix,
      DATABASE_URL: databaseUrl,
      SECRETS_KEY: TEST_SECRETS_KEY,
      RETRY_SCHEDULE: '',
      METRICS_PORT: '0',
      LOG_LEVEL: 'info',
    });
    running.push(program);
    return { ...program, startedAt: Date.now() };
  };

  it.concurrent('exits 1 once RabbitMQ is given up, naming it, while the schema is behind (not after the schema\'s 2 minutes)', async () => {
    const db = await createTestDatabase('give_up_behind', undefined, { migrated: false });
    made.push(db);
    const program = await start(db.url);
    const result = await finishedWithin(program, EXIT_BOUND_MS);
    expect({ code: result?.code, stderr: result?.stderr ?? program.output.stderr, afterMs: Date.now() - program.startedAt }).toMatchObject({
      code: 1,
      stderr: 'dispatcher could not start: RabbitMQ not reachable within 30000 ms (RABBITMQ_URL)\n',
    });
    // It waited for the schema meanwhile, as before.
    expect(program.output.stdout).toContain('database schema is older than this program needs');
  }, EXIT_BOUND_MS + 30_000);

  it.concurrent('exits 1 once RabbitMQ is given up, naming it, while PostgreSQL does not answer either', async () => {
    const program = await start(`postgres://postgres@127.0.0.1:${await freePort()}/nowhere`);
    const result = await finishedWithin(program, EXIT_BOUND_MS);
    expect({ code: result?.code, stderr: result?.stderr ?? program.output.stderr }).toEqual({
      code: 1,
      stderr: 'dispatcher could not start: RabbitMQ not reachable within 30000 ms (RABBITMQ_URL)\n',
    });
    expect(program.output.stdout).toContain('database unreachable at start-up; waiting for it');
  }, EXIT_BOUND_MS + 30_000);

  it.concurrent('exits 1 at once on a schema newer than it knows, naming the schema, while RabbitMQ is still being tried', async () => {
    const db = await createTestDatabase('give_up_newer');
    made.push(db);
    await db.query("INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, 'from_the_future', 'x')", [REQUIRED_VERSION + 1]);
    const program = await start(db.url);
    // Well before RabbitMQ's 30 s: the broker's attempts end with the schema's refusal.
    const result = await finishedWithin(program, 25_000);
    expect({ code: result?.code, stderr: result?.stderr ?? program.output.stderr }).toEqual({
      code: 1,
      stderr: `dispatcher could not start: database schema version ${REQUIRED_VERSION + 1} is newer than this release knows (${REQUIRED_VERSION}), and ${String(REQUIRED_VERSION + 1).padStart(4, '0')}_from_the_future.sql runs only with releases that know it: run the release that migrated it, or a newer one\n`,
    });
  }, 60_000);
});
