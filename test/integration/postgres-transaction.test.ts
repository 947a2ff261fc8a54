import { openPostgres } from '../../libs/delivery-store/index.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';
import { waitFor } from '../support/wait.js';

/**
 * A transaction's connection is checked out of the pool, where the pool no longer listens for its
 * errors: the server going away in the middle (a restart, a crash, a failover) must fail the
 * transaction, not end the process with an 'error' event nobody hears (seen in CI: a dispatcher's
 * transaction when merchant-store-outage crashed its PostgreSQL).
 */
describe('a transaction whose connection the server ends', () => {
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
});
