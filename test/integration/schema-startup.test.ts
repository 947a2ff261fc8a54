/**
 * What each program does at start-up about the schema, as built programs on the real RabbitMQ and
 * PostgreSQL: /healthz from the first moment, whatever it waits for; a schema behind waited for
 * (/readyz 503 naming `webhooks migrate`) until migrate runs; a schema newer than it knows, an exit
 * at once, unless every newer migration declares that this release runs with it (then it runs
 * beside them, saying so once). No program changes the schema.
 */
import { TestBroker, brokerUrl, uniquePrefix } from '../support/broker.js';
import { TEST_SECRETS_KEY } from '../support/dispatcher-program.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';
import { finishedWithin, runProgram, startProgram } from '../support/process.js';
import { freePort } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';
import { openPostgres } from '../../libs/delivery-store/index.js';
import { fileOf, migrate, MIGRATIONS, migrationOf, REQUIRED_VERSION } from '../../libs/migrations/index.js';
import { adminToken, JWT_SECRET } from '../support/api.js';

const PROGRAMS = {
  api: 'dist/apps/api/main.js',
  dispatcher: 'dist/apps/dispatcher/main.js',
  recorder: 'dist/apps/recorder/main.js',
} as const;
type Name = keyof typeof PROGRAMS;
/**
 * From the spawn to /healthz 200. Node's start-up and module loading take under a second on an
 * idle machine, but 2 to 8 s beside the whole suite on 2 cores; what a broken program fails is
 * answering at all while start-up waits (up to SCHEMA_WAIT_MS, 2 minutes).
 */
const LIVENESS_BOUND_MS = 20_000;
const NAMES = Object.keys(PROGRAMS) as Name[];

describe('the programs and the schema version at start-up', () => {
  const prefix = uniquePrefix('schema-startup');
  let test: TestBroker;
  const made: TestDatabase[] = [];
  const running: Array<ReturnType<typeof startProgram>> = [];

  beforeAll(async () => {
    test = await TestBroker.open();
  });

  afterAll(async () => {
    for (const program of running) if (program.child.exitCode === null) program.child.kill('SIGKILL');
    await test.deleteTopology(prefix);
    await test.close();
    for (const db of made) await db.drop();
  });

  /** Each program as deployed: merchants in PostgreSQL, its health on `port` (the API's PORT, the others' METRICS_PORT). */
  const envOf = (name: Name, port: number, databaseUrl: string, extra: Record<string, string> = {}): Record<string, string> => ({
    RABBITMQ_URL: brokerUrl(),
    TOPOLOGY_PREFIX: prefix,
    DATABASE_URL: databaseUrl,
    SECRETS_KEY: TEST_SECRETS_KEY,
    RETRY_SCHEDULE: '',
    QUORUM_GROUP_SIZE: '1',
    STREAM_CLUSTER_SIZE: '1',
    LOG_LEVEL: 'info',
    ...(name === 'api' ? { PORT: String(port), AUTH_JWT_SECRET: 'x'.repeat(40), PORTAL_PUBLIC_URL: 'https://portal.example.com' } : { METRICS_PORT: String(port) }),
    ...extra,
  });
  const start = async (name: Name, databaseUrl: string, extra: Record<string, string> = {}) => {
    const port = await freePort();
    const program = startProgram(PROGRAMS[name], envOf(name, port, databaseUrl, extra));
    running.push(program);
    return { ...program, port, startedAt: Date.now() };
  };
  const get = async (port: number, path: string) => {
    const response = await fetch(`http://127.0.0.1:${port}${path}`);
    return { status: response.status, body: (await response.json()) as Record<string, unknown> };
  };
  const stop = async (program: ReturnType<typeof startProgram>) => {
    program.child.kill('SIGTERM');
    return finishedWithin(program, 15_000);
  };

  it('waits for a schema behind (/healthz 200, /readyz 503 naming webhooks migrate, said once in the log), and serves once migrate ran', async () => {
    const db = await createTestDatabase('schema_behind', undefined, { migrated: false });
    made.push(db);
    const programs = await Promise.all(NAMES.map(async (name) => ({ name, ...(await start(name, db.url)) })));
    const detail = `database schema version 0, this program needs ${REQUIRED_VERSION}: run npx webhooks migrate`;
    for (const program of programs) {
      await waitFor(`${program.name} waiting for the schema`, async () => {
        if (program.child.exitCode !== null) throw new Error(`${program.name} exited: ${program.output.stderr}`);
        return (await get(program.port, '/readyz').catch(() => undefined))?.body.detail === detail;
      }, 60_000, 100);
      expect(await get(program.port, '/healthz')).toEqual({ status: 200, body: { status: 'ok' } });
      expect(await get(program.port, '/readyz')).toMatchObject({ status: 503, body: { status: 'not ready', waitingFor: 'the database schema', detail } });
    }
    // Still waiting a few checks later (one every 2 s), each having said so once.
    await new Promise((resolve) => setTimeout(resolve, 4_500));
    for (const program of programs) {
      expect(program.child.exitCode).toBeNull();
      expect(program.output.stdout.split('database schema is older than this program needs').length - 1).toBe(1);
    }
    expect(await db.query("SELECT count(*)::int AS n FROM pg_tables WHERE schemaname = 'public'")).toEqual([{ n: 0 }]);

    expect(await runProgram(PROGRAMS.api.replace('api/main', 'cli/main'), { DATABASE_URL: db.url }, ['migrate'])).toMatchObject({ code: 0 });
    for (const program of programs) {
      await waitFor(`${program.name} ready once migrated`, async () => {
        if (program.child.exitCode !== null) throw new Error(`${program.name} exited: ${program.output.stderr}`);
        return (await get(program.port, '/readyz')).status === 200;
      }, 60_000, 100);
    }
    for (const program of programs) expect(await stop(program)).toMatchObject({ code: 0 });
  }, 240_000);

  // Side by side (each a program that exits at once, and a database of its own): one after the other they took 18 s.
  it.concurrent.each(NAMES)('stops the %s at once on a schema newer than it knows, saying so', async (name) => {
    const db = await createTestDatabase(`schema_newer_${name}`);
    made.push(db);
    await db.query("INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, 'from_the_future', 'x')", [REQUIRED_VERSION + 1]);
    const program = await start(name, db.url);
    // At once: not after the 2 minutes a schema behind is waited for (60 s: a loaded machine's start-up).
    const result = await finishedWithin(program, 60_000);
    expect(result?.code).toBe(1);
    expect(result?.stderr).toContain(
      `${name} could not start: database schema version ${REQUIRED_VERSION + 1} is newer than this release knows (${REQUIRED_VERSION}), and ${fileOf({ version: REQUIRED_VERSION + 1, name: 'from_the_future' })} runs only with releases that know it: run the release that migrated it, or a newer one`,
    );
  }, 90_000);

  /** A migration of a release after this one, as its file reads, applied after this release's (as that release's migrate would). */
  const later = (version: number, sql: string) => migrationOf(`${String(version).padStart(4, '0')}_later_${version}.sql`, sql);
  const migrateTo = async (url: string, newer: ReturnType<typeof later>[]) => {
    const database = openPostgres(url, { maxConnections: 1 });
    try {
      await migrate(database, [...MIGRATIONS, ...newer]);
    } finally {
      await database.close();
    }
  };
  const declared = `-- runs with releases from: ${String(REQUIRED_VERSION).padStart(4, '0')}`;

  it('runs every program beside a newer schema whose newer migrations declare this release, saying so once; the API writes a merchant on it', async () => {
    const db = await createTestDatabase('schema_beside');
    made.push(db);
    // Additive: a nullable column on a table the programs write, and a table they do not know.
    const beside = [later(REQUIRED_VERSION + 1, `${declared}\nALTER TABLE merchants ADD COLUMN later_note text;\n`), later(REQUIRED_VERSION + 2, `-- A table of its own.\n${declared}\nCREATE TABLE later_things (a int);\n`)];
    await migrateTo(db.url, beside);
    const programs = await Promise.all(NAMES.map(async (name) => ({ name, ...(await start(name, db.url, name === 'api' ? { AUTH_JWT_SECRET: JWT_SECRET } : {})) })));
    for (const program of programs) {
      await waitFor(`${program.name} ready beside the newer schema`, async () => {
        if (program.child.exitCode !== null) throw new Error(`${program.name} exited: ${program.output.stderr}`);
        return (await get(program.port, '/readyz').catch(() => undefined))?.status === 200;
      }, 60_000, 100);
      const said = program.output.stdout.split('\n').filter((line) => line.includes('database schema is newer than this program knows; running beside'));
      expect(said).toHaveLength(1);
      expect(JSON.parse(said[0]!)).toMatchObject({ current: REQUIRED_VERSION + 2, known: REQUIRED_VERSION, beside: beside.map(fileOf) });
    }
    const api = programs.find((program) => program.name === 'api')!;
    const written = await fetch(`http://127.0.0.1:${api.port}/admin/merchants/m_beside`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${await adminToken()}`, 'content-type': 'application/json' },
      body: JSON.stringify({ publicKey: 'pk_beside' }),
    });
    expect(written.status).toBe(201);
    expect(await db.query("SELECT public_key, later_note FROM merchants WHERE id = 'm_beside'")).toEqual([{ public_key: 'pk_beside', later_note: null }]);
    for (const program of programs) expect(await stop(program)).toMatchObject({ code: 0 });
  }, 240_000);

  // One program: the refusal is the gate all three share (each is seen refusing above, naming the file).
  it.concurrent('stops the API at once on a newer schema one of whose newer migrations does not declare this release, naming the first', async () => {
    const name = 'api';
    const db = await createTestDatabase(`schema_not_beside_${name}`);
    made.push(db);
    const narrow = later(REQUIRED_VERSION + 2, 'ALTER TABLE later_things RENAME COLUMN a TO b;\n');
    await migrateTo(db.url, [later(REQUIRED_VERSION + 1, `${declared}\nCREATE TABLE later_things (a int);\n`), narrow]);
    const program = await start(name, db.url);
    const result = await finishedWithin(program, 60_000);
    expect(result?.code).toBe(1);
    expect(result?.stderr).toContain(
      `${name} could not start: database schema version ${REQUIRED_VERSION + 2} is newer than this release knows (${REQUIRED_VERSION}), and ${fileOf(narrow)} runs only with releases that know it: run the release that migrated it, or a newer one`,
    );
  }, 90_000);

  /** How long from the spawn until /healthz answered 200 (it is polled every 20 ms). */
  const healthzAfter = async (program: Awaited<ReturnType<typeof start>>) => {
    await waitFor('/healthz', async () => {
      if (program.child.exitCode !== null) throw new Error(`exited: ${program.output.stderr}`);
      return (await fetch(`http://127.0.0.1:${program.port}/healthz`).catch(() => undefined))?.status === 200;
    }, LIVENESS_BOUND_MS + 10_000, 20);
    return Date.now() - program.startedAt;
  };

  it.each(NAMES)('answers the %s\'s /healthz from its first moment while PostgreSQL is unreachable', async (name) => {
    const program = await start(name, `postgres://postgres@127.0.0.1:${await freePort()}/nowhere`);
    const took = await healthzAfter(program);
    expect(await get(program.port, '/readyz')).toMatchObject({ status: 503, body: { waitingFor: 'PostgreSQL' } });
    expect(program.output.stdout).toContain('database unreachable at start-up; waiting for it');
    await stop(program);
    expect(took).toBeLessThan(LIVENESS_BOUND_MS);
  }, 90_000);

  it.each(NAMES)('answers the %s\'s /healthz from its first moment while RabbitMQ is unreachable', async (name) => {
    const db = await createTestDatabase(`schema_nobroker_${name}`);
    made.push(db);
    const program = await start(name, db.url, { RABBITMQ_URL: `amqp://guest:guest@127.0.0.1:${await freePort()}` });
    const took = await healthzAfter(program);
    await waitFor('waiting for RabbitMQ', async () => (await get(program.port, '/readyz')).body.waitingFor === 'RabbitMQ', 60_000, 100);
    expect(await get(program.port, '/readyz')).toMatchObject({ status: 503, body: { status: 'not ready', waitingFor: 'RabbitMQ' } });
    // What Prometheus's `up` sees of a program still starting (operating.md, WebhooksProgramDown): the
    // dispatcher's and the recorder's METRICS_PORT serve /metrics from the first moment; the API's PORT once started.
    expect((await fetch(`http://127.0.0.1:${program.port}/metrics`)).status).toBe(name === 'api' ? 503 : 200);
    await stop(program);
    expect(took).toBeLessThan(LIVENESS_BOUND_MS);
  }, 90_000);
});
