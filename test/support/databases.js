import { spawn } from 'node:child_process';
import { appendFileSync, readFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import pg from 'pg';

/**
 * Plain JavaScript (with databases.d.ts), as the global setups load it through Node, not Jest's
 * resolver: the tests' databases on the shared server, made and dropped without waiting for what
 * need not be waited for.
 *
 * The run's migrated database: global setup migrates one, and each test's database is a copy of it
 * (CREATE DATABASE ... TEMPLATE, see createTestDatabase) instead of being migrated itself: some
 * 0.5-1 s less per database, and a CI run makes over a hundred. The migrations are dist/'s
 * (the tests run after a build), reading libs/migrations/sql as the programs do.
 */
export const TEMPLATE_VARIABLE = 'TEST_DATABASE_TEMPLATE';

/** The shared server's maintenance database (trust auth, user postgres), or DATABASE_URL's. */
export function adminDatabaseUrl() {
  return process.env.DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/postgres';
}

async function onAdmin(statement) {
  const admin = new pg.Client({ connectionString: adminDatabaseUrl() });
  await admin.connect();
  try {
    await admin.query(statement);
  } finally {
    await admin.end();
  }
}

/**
 * Makes the template and names it in the environment the test workers inherit. Without PostgreSQL
 * or a build (a unit test run), nothing: each test's database is migrated as it is made.
 */
export async function makeDatabaseTemplate() {
  const name = `${process.env.TEST_DATABASE_PREFIX ?? 'h21_test'}_template_${randomBytes(4).toString('hex')}`;
  let made = false;
  try {
    const [{ migrate }, { openPostgres }] = await Promise.all([import('../../dist/libs/migrations/index.js'), import('../../dist/libs/delivery-store/index.js')]);
    await onAdmin(`CREATE DATABASE ${name}`);
    made = true;
    const url = new URL(adminDatabaseUrl());
    url.pathname = `/${name}`;
    // The template takes no connection after this one: a copy is refused while one is open.
    const database = openPostgres(url.toString(), { maxConnections: 1, statementTimeoutMs: 0 });
    await migrate(database).finally(() => database.close());
    process.env[TEMPLATE_VARIABLE] = name;
  } catch {
    if (made) await onAdmin(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`).catch(() => {});
  }
}

/** Drops the run's template, if it made one, as a test's database is dropped: without waiting. */
export function dropDatabaseTemplate() {
  const name = process.env[TEMPLATE_VARIABLE];
  if (!name) return;
  delete process.env[TEMPLATE_VARIABLE];
  dropInBackground(name);
}

/** The run's list of the databases its tests made on the shared server, a name a line (under the run's TMPDIR). */
function madeList() {
  return join(process.env.TMPDIR ?? '/tmp', 'test-databases');
}

/** Notes a database made on the shared server, for the sweep after the run. */
export function noteDatabase(name) {
  appendFileSync(madeList(), `${name}\n`);
}

/**
 * Drops a test's database on the shared server without waiting: DROP DATABASE makes PostgreSQL
 * checkpoint (0.1-1.8 s a drop here under load 12), which a test's teardown need not wait for. A
 * detached process of its own drops it, outliving the test worker; what it could not drop, the
 * sweep after the run does.
 */
export function dropInBackground(name) {
  const script = "import pg from 'pg'; const c = new pg.Client({ connectionString: process.argv[1] }); await c.connect(); await c.query(`DROP DATABASE IF EXISTS ${process.argv[2]} WITH (FORCE)`); await c.end();";
  spawn(process.execPath, ['--input-type=module', '-e', script, adminDatabaseUrl(), name], { detached: true, stdio: 'ignore' }).unref();
}

/** After the run: drops what its tests made and is still there (a drop that failed or is still under way). */
export async function dropLeftDatabases() {
  let names;
  try {
    names = readFileSync(madeList(), 'utf8').split('\n').filter(Boolean);
  } catch {
    return;
  }
  const admin = new pg.Client({ connectionString: adminDatabaseUrl() });
  try {
    await admin.connect();
    const { rows } = await admin.query('SELECT datname FROM pg_database WHERE datname = ANY($1)', [names]);
    await Promise.all(rows.map((row) => onAdmin(`DROP DATABASE IF EXISTS ${row.datname} WITH (FORCE)`).catch(() => {})));
  } catch {
    // PostgreSQL away: nothing to sweep now.
  } finally {
    await admin.end().catch(() => {});
  }
}
