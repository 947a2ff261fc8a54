import pg from 'pg';
import { HEADERS } from '../../libs/contracts/index.js';
import { openPostgres } from '../../libs/delivery-store/index.js';
import { WaitStore } from '../../libs/waits/index.js';
import { PrivatePostgres } from '../support/private-postgres.js';
import { once } from '../support/wait.js';

/**
 * A batch of waits whose transaction failed under way is asked about by its transaction id before it
 * is written again (WaitStore.write). PostgreSQL crashed before that transaction's WAL was flushed:
 * the server's next run knows nothing of the id, calls it "in the future" (order-faults in CI: the
 * batch's webhook parked as invalid, `transaction ID 828 is in the future`), then gives it to another
 * transaction, whose commit the old check took for the batch's (the waits never written, their
 * webhooks acked: lost).
 */
/** One backend killed (as by the OOM killer): the server ends every other and recovers in place, its start time kept. */
async function killOneBackend(server: PrivatePostgres): Promise<void> {
  const client = new pg.Client({ connectionString: server.url });
  client.on('error', () => {});
  await client.connect();
  const pid = (await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
  process.kill(pid, 'SIGKILL');
  await client.end().catch(() => {});
}

const crashes: Array<[string, (server: PrivatePostgres) => Promise<void>]> = [
  ['the server crashed and started again', async (server) => {
    await server.crash();
    await server.up();
  }],
  ['one backend killed, the server restarted in place', killOneBackend],
];

describe.each(crashes)('a batch of waits failed under way, then (%s) before its WAL was flushed', (_name, crash) => {
  it('is written again after the restart, whether its transaction id is unused or given to another since', async () => {
    const server = await PrivatePostgres.start();
    if (!server) throw new Error(`no PostgreSQL binaries to start a server of the test's own (PG_BIN_DIR)`);
    const db = openPostgres(server.url, { maxConnections: 2 });
    try {
      let failNext = true;
      let xid = 0n;
      // The batch's transaction runs, then its connection fails before COMMIT: rolled back, its id kept as unsure.
      const store = new WaitStore({
        query: (text, params) => db.query(text, params),
        transaction: (work) => db.transaction(async (tx) => {
          const result = await work(tx);
          if (!failNext) return result;
          failNext = false;
          xid = BigInt((await tx.query<{ xid: string }>('SELECT pg_current_xact_id()::text AS xid')).rows[0]!.xid);
          throw new Error('Connection terminated unexpectedly');
        }),
      });
      const put = {
        merchantId: 'm_crash', webhookId: 'evt_crash', hand: 0, attempt: 1, delayMs: 60_000, reason: 'retry' as const,
        content: Buffer.from('{}'), spanLeftMs: 3_600_000, headers: { [HEADERS.attempts]: 1, [HEADERS.webhookId]: 'evt_crash' },
      };
      await expect(store.write([put], [])).rejects.toThrow('Connection terminated unexpectedly');
      await crash(server);

      // The next run starts below the batch's id (its WAL was never flushed): the case this test is about.
      const next = await once('PostgreSQL back', async () => BigInt((await db.query<{ x: string }>('SELECT pg_snapshot_xmax(pg_current_snapshot())::text AS x')).rows[0]!.x));
      expect(next).toBeLessThanOrEqual(xid);
      // Other transactions commit meanwhile, one of them under the batch's id.
      while (BigInt((await db.query<{ x: string }>('SELECT pg_current_xact_id()::text AS x')).rows[0]!.x) < xid);

      await once('the batch written', () => store.write([put], []));
      const { rows } = await db.query<{ webhook_id: string }>('SELECT webhook_id FROM webhook_waits');
      expect(rows).toEqual([{ webhook_id: 'evt_crash' }]);
    } finally {
      await db.close();
      await server.stop();
    }
  }, 60_000);
});
