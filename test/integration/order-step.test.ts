import { openPostgres, type Database } from '../../libs/delivery-store/index.js';
import { OrderStore } from '../../libs/ordering/index.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';

/**
 * webhook_order_step() (migration 0010) as the gate calls it: an intake stepped without its wait
 * is told `behind` and nothing is written for it; stepped again with its wait, it waits, or heads
 * its line if the one before it ended in between. Seen failing with a step that answered a
 * wait-less intake `waiting` without writing its wait (the reference then stuck behind nothing).
 */
describe('an order step', () => {
  let db: TestDatabase;
  let database: Database;
  let store: OrderStore;
  const wait = { headers: { 'webhook-id': 'x' }, content: Buffer.from('{"event":"refund.completed"}') };
  const waits = async (webhookId: string) => db.query('SELECT reason, pick_at FROM webhook_waits WHERE webhook_id = $1', [webhookId]);

  beforeAll(async () => {
    db = await createTestDatabase('order_step');
    database = openPostgres(db.url, { maxConnections: 2 });
    store = new OrderStore(database);
  });

  afterAll(async () => {
    await database.close();
    await db.drop();
  });

  it('tells an intake behind another so, writing nothing until it is stepped with its wait', async () => {
    const first = { merchantId: 'm_step', webhookId: 'evt_a1', key: 'REF-A' };
    const next = { merchantId: 'm_step', webhookId: 'evt_a2', key: 'REF-A' };
    expect([...(await store.step([first, next], []))]).toEqual([['m_step\u001f\u001fevt_a1', 'head'], ['m_step\u001f\u001fevt_a2', 'behind']]);
    expect(await waits('evt_a2')).toEqual([]);
    expect((await store.step([{ ...next, ...wait }], [])).get('m_step\u001f\u001fevt_a2')).toBe('waiting');
    expect(await waits('evt_a2')).toEqual([{ reason: 'ordered', pick_at: null }]);
    // The first ends: the second is due now.
    await store.step([], [{ merchantId: 'm_step', webhookId: 'evt_a1' }]);
    expect((await waits('evt_a2'))[0]!.pick_at).not.toBeNull();
  });

  it('heads its line when the one before it ended between its two steps, with no wait written', async () => {
    const first = { merchantId: 'm_step', webhookId: 'evt_b1', key: 'REF-B' };
    const next = { merchantId: 'm_step', webhookId: 'evt_b2', key: 'REF-B' };
    await store.step([first], []);
    expect((await store.step([next], [])).get('m_step\u001f\u001fevt_b2')).toBe('behind');
    await store.step([], [{ merchantId: 'm_step', webhookId: 'evt_b1' }]);
    expect((await store.step([{ ...next, ...wait }], [])).get('m_step\u001f\u001fevt_b2')).toBe('head');
    expect(await waits('evt_b2')).toEqual([]);
    // A copy of the first, redelivered after its end, is known as done.
    expect((await store.step([first], [])).get('m_step\u001f\u001fevt_b1')).toBe('ended');
  });
});
