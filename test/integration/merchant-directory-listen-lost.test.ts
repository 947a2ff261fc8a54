import type { Database, Listener } from '../../libs/delivery-store/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { MerchantSettings, PgMerchantDirectory, SecretBox } from '../../libs/merchants/index.js';
import { TEST_SECRETS_KEY } from '../support/dispatcher-program.js';
import { putWithEndpoint } from '../support/merchant-endpoints.js';
import { useTestDatabase } from '../support/postgres.js';
import { waitFor } from '../support/wait.js';

/**
 * One backend of PostgreSQL killed (the OOM killer) restarts the server in place: its start time is
 * kept, every connection closed, and the WAL not yet flushed lost, so the ids of transactions that
 * wrote nothing durable are given again, below a replica's cursor: a change made with one was never
 * read (`change_xid >= cursor`), the old settings served until the merchant's next write. A replica
 * whose LISTEN connection was lost loads every merchant again. Here the change's id is set below the
 * cursor by hand, and the LISTEN's connection closed; seen failing so with a poll in place of the load.
 */
describe('a replica whose listening connection was lost', () => {
  const postgres = useTestDatabase('merchant_listen_lost');

  it('loads every merchant again: a change whose transaction id fell below its cursor is served', async () => {
    // Its listening connections, to end one as a server's crash does.
    const listeners: Listener[] = [];
    const real = postgres.database;
    const database: Database = { ...real, listen: async (channel, heard) => {
      const listener = await real.listen(channel, heard);
      listeners.push(listener);
      return listener;
    } };
    const directory = new PgMerchantDirectory(database, new SecretBox(Buffer.from(TEST_SECRETS_KEY, 'base64')), silentLogger(), { pollIntervalMs: 3_600_000 });
    await directory.start();
    try {
      const settings = new MerchantSettings(directory, { allowHttp: true, allowPrivateTargets: true });
      await putWithEndpoint(settings, 'm_listen_lost', { publicKey: 'pk_listen_lost_1', url: 'http://127.0.0.1:1/hook' });
      const before = directory.versionOf('m_listen_lost')!;
      await waitFor('the replica listening', () => listeners.length === 1, 5_000);
      // A change committed under an id a crash gave again: below the cursor of the replica's last look.
      await real.query("UPDATE merchants SET version = version + 1, change_xid = '3'::xid8 WHERE id = 'm_listen_lost'");
      await directory.poll();
      expect(directory.versionOf('m_listen_lost')).toBe(before);
      await listeners[0]!.close();
      await waitFor('the change served', () => directory.versionOf('m_listen_lost') === before + 1, 10_000);
      expect(directory.reloads).toBe(1);
    } finally {
      await directory.close();
    }
  });
});
