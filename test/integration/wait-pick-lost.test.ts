import { HEADERS } from '../../libs/contracts/index.js';
import { WaitStore } from '../../libs/waits/index.js';
import { useTestDatabase } from '../support/postgres.js';

/** The wait lease of a dispatcher by default: what a wait leased by a pick whose hand-back never went waited out. */
const LEASE_MS = 60_000;

/**
 * PostgreSQL crashed (or the connection dropped) as it answered a pick: the pick was committed, its
 * waits leased with a new hand, and the scheduler, told only that the statement failed, published
 * none of them. Each waited out its lease (a minute) before it was handed back: in
 * merchant-store-outage, a wait due at the crash went out 42 s after the database's return, not
 * within 10 s.
 */
describe('a pick whose answer was lost after its commit', () => {
  const postgres = useTestDatabase('wait_pick_lost', { maxConnections: 2 });

  const due = (webhookId: string) => ({
    merchantId: 'm_pick_lost', webhookId, hand: 0, attempt: 1, delayMs: 0, reason: 'retry' as const, content: Buffer.from('{}'), spanLeftMs: 3_600_000,
    headers: { [HEADERS.attempts]: 1, [HEADERS.webhookId]: webhookId },
  });

  /** A wait's hand now (each hand is drawn anew, 0033: a later one is greater). */
  const handOf = async (webhookId: string) =>
    (await postgres.database.query<{ hand: number }>('SELECT hand FROM webhook_waits WHERE webhook_id = $1', [webhookId])).rows[0]!.hand;

  it('leaves its waits to the next pick, not to the end of their lease; a wait handed back by a pick answered is left leased', async () => {
    const store = new WaitStore(postgres.database);
    // The next statement or transaction through `lossy` is committed, and its answer lost.
    let loseNext = false;
    const lost = <T>(result: T): T => {
      if (!loseNext) return result;
      loseNext = false;
      throw new Error('Connection terminated unexpectedly');
    };
    const lossy = new WaitStore({
      query: async (text, params) => lost(await postgres.database.query(text, params)),
      transaction: async (work) => lost(await postgres.database.transaction(work)),
    });

    await store.write([due('evt_pick_answered')], []);
    expect((await lossy.pick(10, LEASE_MS)).handed.map((w) => w.webhookId)).toEqual(['evt_pick_answered']);
    await store.write([due('evt_pick_lost')], []);
    const written = await handOf('evt_pick_lost');
    loseNext = true;
    await expect(lossy.pick(10, LEASE_MS)).rejects.toThrow('Connection terminated unexpectedly');
    // Committed: leased with a new hand, handed back nowhere.
    const { rows } = await postgres.database.query<{ hand: number; leased: boolean }>(
      "SELECT hand, pick_at > now() + interval '50 seconds' AS leased FROM webhook_waits WHERE webhook_id = 'evt_pick_lost'",
    );
    expect(rows).toEqual([{ hand: expect.any(Number), leased: true }]);
    expect(rows[0]!.hand).toBeGreaterThan(written);

    // The next pick hands it back (a new hand), and only it: the one handed back before keeps its lease.
    const next = await lossy.pick(10, LEASE_MS);
    expect(next.handed.map((w) => [w.webhookId, w.hand > rows[0]!.hand])).toEqual([['evt_pick_lost', true]]);
    expect((await lossy.pick(10, LEASE_MS)).handed).toEqual([]);
  });

  it('a pick that failed before its commit leaves nothing leased, and the next pick hands its waits back', async () => {
    const store = new WaitStore(postgres.database);
    const failing = new WaitStore({
      query: async () => Promise.reject(new Error('connect ECONNREFUSED')),
      transaction: async () => Promise.reject(new Error('connect ECONNREFUSED')),
    });
    await store.write([due('evt_pick_refused')], []);
    const written = await handOf('evt_pick_refused');
    await expect(failing.pick(10, LEASE_MS)).rejects.toThrow('ECONNREFUSED');
    expect(await handOf('evt_pick_refused')).toBe(written);
    expect((await store.pick(10, LEASE_MS)).handed.map((w) => [w.webhookId, w.hand > written])).toEqual([['evt_pick_refused', true]]);
  });
});
