import pg from 'pg';
import { openPostgres } from '../../libs/delivery-store/index.js';
import { PrivatePostgres } from '../support/private-postgres.js';
import { waitFor } from '../support/wait.js';

/**
 * DATABASE_URL reaching a standby, as during a failover: LISTEN is refused (25006, "cannot execute
 * LISTEN during recovery"). Each refused listen closes its connection; before, each kept one open
 * (keepListening tries again every few seconds: the merchant directory of every replica, the
 * circuits of every dispatcher), until the server's max_connections was full. Seen failing so: 3 left.
 */
describe('a listen refused by a standby', () => {
  it('closes the connection it opened, each time', async () => {
    const server = await PrivatePostgres.start();
    if (!server) throw new Error(`no PostgreSQL binaries to start a server of the test's own (PG_BIN_DIR)`);
    const db = openPostgres(server.url, { maxConnections: 1, applicationName: 'standby-listen' });
    const counter = new pg.Client({ connectionString: server.url });
    try {
      await server.standby();
      for (let i = 0; i < 3; i++) await expect(db.listen('merchant_changes', () => {})).rejects.toMatchObject({ code: '25006' });
      await counter.connect();
      const listening = async () =>
        Number((await counter.query<{ n: string }>("SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = 'standby-listen'")).rows[0]!.n);
      await waitFor('the refused listens’ connections closed', async () => (await listening()) === 0, 5_000);
    } finally {
      await counter.end().catch(() => {});
      await db.close();
      await server.stop();
    }
  }, 60_000);
});
