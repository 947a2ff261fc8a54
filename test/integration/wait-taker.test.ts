import { HEADERS } from '../../libs/contracts/index.js';
import { openPostgres } from '../../libs/delivery-store/index.js';
import { WaitStore, WaitTaker } from '../../libs/waits/index.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';

describe('taking hand-backs of waits to their attempts', () => {
  let db: TestDatabase;
  let database: ReturnType<typeof openPostgres>;

  beforeAll(async () => {
    db = await createTestDatabase('wait_taker');
    database = openPostgres(db.url, { maxConnections: 2 });
  });

  afterAll(async () => {
    await database.close();
    await db.drop();
  });

  it('takes those of one turn in one statement, each current hand true and each stale copy false', async () => {
    let statements = 0;
    const store = new WaitStore({ query: (text, params) => (statements++, database.query(text, params)), transaction: (work) => database.transaction(work) });
    const ids = ['evt_take_1', 'evt_take_2', 'evt_take_3'];
    await store.write(
      ids.map((webhookId) => ({
        merchantId: 'm_take', webhookId, hand: 0, attempt: 1, delayMs: 0, reason: 'retry' as const, content: Buffer.from('{}'), spanLeftMs: 3_600_000,
        headers: { [HEADERS.attempts]: 1, [HEADERS.webhookId]: webhookId },
      })),
      [],
    );
    const { handed: picked } = await store.pick(10, 60_000);
    expect(picked.map((w) => w.hand)).toEqual([1, 1, 1]);
    const taker = new WaitTaker(store, 60_000);
    statements = 0;
    const taken = await Promise.all([
      ...picked.map((w) => taker.take({ merchantId: w.merchantId, webhookId: w.webhookId, hand: w.hand })),
      // A stale copy: the hand before the pick.
      taker.take({ merchantId: 'm_take', webhookId: 'evt_take_1', hand: 0 }),
      // A wait that does not exist (ended).
      taker.take({ merchantId: 'm_take', webhookId: 'evt_gone', hand: 1 }),
    ]);
    expect(taken).toEqual(['taken', 'taken', 'taken', 'stale', 'stale']);
    expect(statements).toBe(1);
    // Each lease now runs from the take: the rows are not due again.
    expect((await store.pick(10, 60_000)).handed).toEqual([]);
    // A take of a later turn goes in a statement of its own, and still finds its hand.
    statements = 0;
    expect(await taker.take({ merchantId: 'm_take', webhookId: 'evt_take_2', hand: 1 })).toBe('taken');
    expect(statements).toBe(1);
  });
});
