import { openPostgres } from '../../libs/delivery-store/index.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';
import { waitFor } from '../support/wait.js';

/**
 * A transaction's connection is checked out of the pool, where the pool no longer listens for its
 * errors: the server going away in the middle (a restart, a crash, a failover) must fail the
 * transaction, not end the process with an 'error' event nobody hears (seen in CI: a dispatcher's
 * transaction when merchant-store-outage crashed its PostgreSQL).
 */
describe('PostgreSQL sessions: a transaction whose connection the server ends, and keepalives', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase('pg_transaction', undefined, { migrated: false });
  });
  afterAll(async () => {
    await db?.drop();
  });

  it('rejects, and the pool goes on with a new connection', async () => {
    const database = openPostgres(db.url, { maxConnections: 1 });
    try {
      const failed = await database.transaction(async (tx) => {
        const { rows } = await tx.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
        // The server ends this session itself once it idles in the transaction: nothing of another's touched.
        await tx.query("SET LOCAL idle_in_transaction_session_timeout = '50ms'");
        await waitFor('the server to end the session', async () => (await db.query('SELECT 1 FROM pg_stat_activity WHERE pid = $1', [rows[0]!.pid])).length === 0, 5_000, 20);
        await tx.query('SELECT 1');
      }).then(() => undefined, (err: Error) => err);
      expect(String(failed)).toMatch(/connection/);
      // The dead connection was not given back to the pool: the next query has a live one.
      expect((await database.query<{ one: number }>('SELECT 1 AS one')).rows).toEqual([{ one: 1 }]);
    } finally {
      await database.close();
    }
  });

  it('keeps a statement another caller sends on a held session out of its open transaction: that transaction rolled back, the statement still stands', async () => {
    // The recorder's case: its hourly upkeep's lock-bounded transactions (withLockWait) and its
    // batches share the lead's session. A batch sent while an upkeep transaction was open ran inside
    // it; the upkeep refused (a lock not had within 1 s) rolled the batch back after the recorder saw
    // it stored and moved its offset on: the next batch's offset skipped those records for ever.
    await db.query('CREATE TABLE IF NOT EXISTS apart (n integer)');
    const database = openPostgres(db.url);
    const session = await database.session();
    try {
      let entered!: () => void;
      const inside = new Promise<void>((resolve) => (entered = resolve));
      const upkeep = session.transaction(async (tx) => {
        await tx.query('INSERT INTO apart VALUES (1)');
        entered();
        await tx.query('SELECT pg_sleep(0.2)');
        throw new Error('refused: lock not available');
      }).then(() => undefined, (err: Error) => err.message);
      await inside;
      // The batch: its statement resolves, so its caller takes it as stored.
      await session.query('INSERT INTO apart VALUES (2)');
      expect(await upkeep).toBe('refused: lock not available');
      expect((await db.query<{ n: number }>('SELECT n FROM apart ORDER BY n')).map((row) => row.n)).toEqual([2]);
    } finally {
      await session.close();
      await database.close();
    }
  });

  it('asks the server for keepalives on every session, pooled or held (a vanished host\'s session, and its locks, end within a minute)', async () => {
    const database = openPostgres(db.url, { maxConnections: 1 });
    const session = await database.session();
    try {
      const shown = async (query: (sql: string) => Promise<{ rows: Array<Record<string, string>> }>) =>
        (await query("SELECT current_setting('tcp_keepalives_idle') AS idle, current_setting('tcp_keepalives_interval') AS every, current_setting('tcp_keepalives_count') AS count, current_setting('synchronous_commit') AS sync")).rows[0];
      const expected = { idle: '30', every: '10', count: '3', sync: 'on' };
      expect(await shown((sql) => database.query(sql) as never)).toEqual(expected);
      expect(await shown((sql) => session.query(sql) as never)).toEqual(expected);
    } finally {
      await session.close();
      await database.close();
    }
  });
});
