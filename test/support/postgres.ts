import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { type Database, openPostgres, type PostgresOptions } from '../../libs/delivery-store/index.js';
import { migrate } from '../../libs/migrations/index.js';
import { adminDatabaseUrl, dropInBackground, noteDatabase, TEMPLATE_VARIABLE } from './databases.js';

/**
 * PostgreSQL for the delivery log's tests: DATABASE_URL when set, else the local server with
 * trust auth. Each test file gets a database of its own, dropped after.
 */
export { adminDatabaseUrl };

export interface TestDatabase {
  url: string;
  name: string;
  query<R = Record<string, unknown>>(text: string, params?: unknown[]): Promise<R[]>;
  drop(): Promise<void>;
}

/**
 * A database of the test's own on the shared server, or on `adminUrl`'s (a private server's),
 * migrated as `webhooks migrate` leaves it before the programs start (`migrated: false`: empty).
 */
export async function createTestDatabase(label: string, adminUrl = adminDatabaseUrl(), options: { migrated?: boolean } = {}): Promise<TestDatabase> {
  const prefix = process.env.TEST_DATABASE_PREFIX ?? 'h21_test';
  const name = `${prefix}_${label.replace(/[^a-z0-9_]/g, '_')}_${randomBytes(4).toString('hex')}`;
  const migrated = options.migrated ?? true;
  const shared = adminUrl === adminDatabaseUrl();
  // A copy of the run's migrated template (global setup's) on the shared server: migrated as it is made.
  const template = migrated && shared ? process.env[TEMPLATE_VARIABLE] : undefined;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE ${name}${template ? ` TEMPLATE ${template}` : ''}`);
  } finally {
    await admin.end();
  }
  if (shared) noteDatabase(name);
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  if (migrated && !template) await migrateDatabase(url.toString());
  const pool = new pg.Pool({ connectionString: url.toString(), max: 2 });
  pool.on('error', () => {});
  return {
    url: url.toString(),
    name,
    query: async (text, params) => (await pool.query(text, params)).rows as never,
    async drop() {
      await pool.end().catch(() => {});
      // On the shared server without waiting for its checkpoint; on a private one as before (it may be stopped next).
      if (shared) return dropInBackground(name);
      const client = new pg.Client({ connectionString: adminUrl });
      await client.connect();
      try {
        await client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      } finally {
        await client.end();
      }
    },
  };
}

/** What `webhooks migrate` does, on `url`. */
/**
 * Registers (beforeAll / afterAll) a database of the file's own (createTestDatabase) and a pool on it
 * (`pool`'s options): made before its tests, closed and dropped after. Its fields are set from beforeAll on.
 */
export function useTestDatabase(label: string, pool: PostgresOptions = {}, options: { migrated?: boolean } = {}): { db: TestDatabase; database: Database } {
  const made = {} as { db: TestDatabase; database: Database };
  beforeAll(async () => {
    made.db = await createTestDatabase(label, undefined, options);
    made.database = openPostgres(made.db.url, pool);
  });
  afterAll(async () => {
    await made.database?.close();
    await made.db?.drop();
  });
  return made;
}

export async function migrateDatabase(url: string): Promise<void> {
  const database = openPostgres(url, { maxConnections: 1, statementTimeoutMs: 0 });
  await migrate(database).finally(() => database.close());
}

/** The database a harness made for a topology prefix: the API of the same test uses it too. */
const byPrefix = new Map<string, string>();

export function registerDatabase(prefix: string, url: string): void {
  byPrefix.set(prefix, url);
}

export function forgetDatabase(prefix: string): void {
  byPrefix.delete(prefix);
}

export function databaseOf(prefix: string): string | undefined {
  return byPrefix.get(prefix);
}
