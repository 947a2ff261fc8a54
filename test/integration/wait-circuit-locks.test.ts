import { HEADERS } from '../../libs/contracts/index.js';
import { type Database, openPostgres, type Queryable } from '../../libs/delivery-store/index.js';
import { WaitStore } from '../../libs/waits/index.js';
import { createTestDatabase } from '../support/postgres.js';

/**
 * Two dispatchers' wait batches that touch one open circuit row at once: each with a wait behind the
 * circuit and its close (a 4xx answered through it). Each batch's statement read the row FOR SHARE and
 * its close then updated it: two batches at once deadlocked, one aborted after a second and written again.
 */
describe('two wait batches closing one circuit at once', () => {
  it('both commit, neither aborted as a deadlock', async () => {
    const database = await createTestDatabase('wait_circuit_locks');
    const pools = [openPostgres(database.url, { maxConnections: 2 }), openPostgres(database.url, { maxConnections: 2 })];
    // Each batch stops after its statement of waits until the other has reached the same point (or 1.5 s passed).
    let arrived = 0;
    let release: () => void = () => {};
    const bothThere = new Promise<void>((resolve) => (release = resolve));
    const gated = (db: Database): Pick<Database, 'query' | 'transaction'> => ({
      query: db.query.bind(db) as Database['query'],
      transaction: <T>(work: (tx: Queryable) => Promise<T>) => db.transaction((tx) => work({
        query: async <R>(text: string, params?: unknown[]) => {
          const answer = await tx.query<R>(text, params);
          if (text.trimStart().startsWith('WITH puts')) {
            if (++arrived === 2) release();
            await Promise.race([bothThere, new Promise((resolve) => setTimeout(resolve, 1_500))]);
          }
          return answer;
        },
      } as Queryable)),
    });
    try {
      await database.query("INSERT INTO wait_circuits (merchant_id, endpoint_id, probe_at) VALUES ('m_1', 'ep_1', now() + interval '1 minute')");
      const put = (webhookId: string) => ({
        merchantId: 'm_1', webhookId, endpointId: 'ep_1', hand: 0, attempt: 1, delayMs: 1_000, reason: 'retry' as const,
        headers: { [HEADERS.webhookId]: webhookId }, content: Buffer.from('{}'), spanLeftMs: 86_400_000, closesCircuit: true,
      });
      const written = await Promise.allSettled(pools.map((db, i) => new WaitStore(gated(db)).write([put(`evt_${i}`)], [], [{ merchantId: 'm_1', endpointId: 'ep_1' }])));
      expect(written.map((w) => (w.status === 'rejected' ? String((w.reason as Error).message) : w.status))).toEqual(['fulfilled', 'fulfilled']);
      expect(await database.query("SELECT closing FROM wait_circuits WHERE merchant_id = 'm_1'")).toEqual([{ closing: true }]);
    } finally {
      for (const db of pools) await db.close();
      await database.drop();
    }
  });
});
