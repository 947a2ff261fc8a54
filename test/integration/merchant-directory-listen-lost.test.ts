import pg from 'pg';
import { type Database, openPostgres } from '../../libs/delivery-store/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { MerchantSettings, PgMerchantDirectory, SecretBox } from '../../libs/merchants/index.js';
import { TEST_SECRETS_KEY } from '../support/dispatcher-program.js';
import { putWithEndpoint } from '../support/merchant-endpoints.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';
import { waitFor } from '../support/wait.js';

/**
 * One backend of PostgreSQL killed (the OOM killer) restarts the server in place: its start time is
 * kept, every connection closed, and the WAL not yet flushed lost, so the ids of transactions that
 * wrote nothing durable are given again, below a replica's cursor: a change made with one was never
 * read (`change_xid >= cursor`), the old settings served until the merchant's next write. A replica
 * whose LISTEN connection was lost loads every merchant again. Here the change's id is set below the
 * cursor by hand, and the LISTEN's backend ended; seen failing so with a poll in place of the load.
 */
describe('a replica whose listening connection was lost', () => {
  let db: TestDatabase;
  let real: Database;
  const admin = () => new pg.Client({ connectionString: db.url });

  beforeAll(async () => {
    db = await createTestDatabase('merchant_listen_lost');
    real = openPostgres(db.url);
  });

  afterAll(async () => {
    await real?.close();
    await db?.drop();
  });

  it('loads every merchant again: a change whose transaction id fell below its cursor is served', async () => {
    const directory = new PgMerchantDirectory(real, new SecretBox(Buffer.from(TEST_SECRETS_KEY, 'base64')), silentLogger(), { pollIntervalMs: 3_600_000 });
    await directory.start();
    const client = admin();
    await client.connect();
    try {
      const settings = new MerchantSettings(directory, { allowHttp: true, allowPrivateTargets: true });
      await putWithEndpoint(settings, 'm_listen_lost', { publicKey: 'pk_listen_lost_1', url: 'http://127.0.0.1:1/hook' });
      const before = directory.versionOf('m_listen_lost')!;
      const listener = async () => (await client.query<{ pid: number }>(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN%' AND pid <> pg_backend_pid()")).rows[0]?.pid;
      await waitFor('the replica listening', async () => (await listener()) !== undefined, 5_000);
      // A change committed under an id a crash gave again: below the cursor of the replica's last look.
      await client.query("UPDATE merchants SET version = version + 1, change_xid = '3'::xid8 WHERE id = 'm_listen_lost'");
      await directory.poll();
      expect(directory.versionOf('m_listen_lost')).toBe(before);
      await client.query('SELECT pg_terminate_backend($1)', [await listener()]);
      await waitFor('the change served', () => directory.versionOf('m_listen_lost') === before + 1, 10_000);
      expect(directory.reloads).toBe(1);
    } finally {
      await client.end();
      await directory.close();
    }
  });
});
