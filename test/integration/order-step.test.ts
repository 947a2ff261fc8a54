import pg from 'pg';
import { openPostgres, type Database } from '../../libs/delivery-store/index.js';
import { orderKeyOf } from '../../libs/contracts/index.js';
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
  /** Rows of `table` the client's open transaction has read, by index or by scan. */
  const rowsRead = async (client: pg.Client, table: string) =>
    Number((await client.query<{ fetched: string }>('SELECT idx_tup_fetch + seq_tup_read AS fetched FROM pg_stat_xact_user_tables WHERE relname = $1', [table])).rows[0]!.fetched);

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

  it('finds the open place of a payout admitted before payout keys had their prefix (its row keyed by the bare reference)', async () => {
    // As an older release admitted it: the key was the bare reference.
    await store.step([{ merchantId: 'm_step', webhookId: 'evt_old_payout', key: 'PAY-OLD' }], []);
    expect(await store.openPlaces('m_step', 'evt_old_payout', orderKeyOf('payout', { reference: 'PAY-OLD' })!)).toEqual(['']);
  });

  it('wakes the next webhook of each ended line by its key, not by reading every wait of the endpoint: a step costs the same behind a backlog', async () => {
    // One session, as a dispatcher's pooled connection: its plans are made at its first steps, on
    // near-empty tables, and kept (force_generic_plan) while the backlog grows.
    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    try {
      const session = new OrderStore(client);
      const line = (key: string, n: number) => ({ merchantId: 'm_backlog', endpointId: 'ep_backlog_1', webhookId: `evt_${key}_${n}`, key });
      await session.step([line('WARM', 1)], []);
      await session.step([{ ...line('WARM', 2), ...wait }], []);
      await session.step([], [line('WARM', 1)]);
      // The backlog: 1,000 references of the endpoint, each a head and three waiting behind it.
      await client.query(`INSERT INTO webhook_order (merchant_id, endpoint_id, order_key, webhook_id)
        SELECT 'm_backlog', 'ep_backlog_1', 'REF-' || k, 'evt_REF-' || k || '_' || n FROM generate_series(1, 1000) k, generate_series(1, 4) n ORDER BY k, n`);
      await client.query(`INSERT INTO webhook_waits (merchant_id, webhook_id, endpoint_id, attempt, due_at, reason, headers)
        SELECT 'm_backlog', 'evt_REF-' || k || '_' || n, 'ep_backlog_1', 0, now(), 'ordered', '{}' FROM generate_series(1, 1000) k, generate_series(2, 4) n`);
      await client.query('BEGIN');
      // 30 lines' heads end in one step: each line's second is due, and nothing else.
      await session.step([], Array.from({ length: 30 }, (_, i) => line(`REF-${i + 1}`, 1)));
      const read = await rowsRead(client, 'webhook_waits');
      const woken = await client.query("SELECT webhook_id FROM webhook_waits WHERE merchant_id = 'm_backlog' AND webhook_id LIKE 'evt_REF-%' AND pick_at IS NOT NULL");
      await client.query('ROLLBACK');
      expect(woken.rows.map((r) => r.webhook_id).sort()).toEqual(Array.from({ length: 30 }, (_, i) => `evt_REF-${i + 1}_2`).sort());
      // A wait read a woken line (and a few more for the plan's own lookups); the backlog's 3,000 are not read.
      expect(read).toBeLessThan(300);
    } finally {
      await client.end();
    }
  });

  it("probes its rows by key whatever the table held when the session's plans were made: a step does not read the table", async () => {
    // A session whose first step ran on a table of three rows, analyzed, then 5,000 more: its generic
    // plans (0016) joined the step's arrays to the whole table, its ended rows, clearing and
    // admissions each a scan of the primary key; this step read 8,524 rows, until autovacuum's next
    // ANALYZE made the plans again.
    const fresh = await createTestDatabase('order_step_stale');
    const client = new pg.Client({ connectionString: fresh.url });
    await client.connect();
    try {
      const session = new OrderStore(client);
      const line = (key: string, n: number) => ({ merchantId: 'm_stale', endpointId: 'ep_stale_1', webhookId: `evt_${key}_${n}`, key });
      await client.query("INSERT INTO webhook_order (merchant_id, endpoint_id, order_key, webhook_id) SELECT 'm_stale', 'ep_stale_1', 'SEED-' || k, 'evt_SEED-' || k || '_1' FROM generate_series(1, 3) k");
      await client.query('ANALYZE webhook_order');
      await session.step([line('FIRST', 1)], [line('SEED-1', 1)]);
      await client.query(`INSERT INTO webhook_order (merchant_id, endpoint_id, order_key, webhook_id)
        SELECT 'm_stale', 'ep_stale_1', 'REF-' || k, 'evt_REF-' || k || '_' || n FROM generate_series(1, 1000) k, generate_series(1, 5) n ORDER BY k, n`);
      await client.query('BEGIN');
      // Three lines' heads end, and three webhooks join other lines behind theirs.
      const states = await session.step(
        Array.from({ length: 3 }, (_, i) => ({ ...line(`REF-${i + 10}`, 6), ...wait })),
        Array.from({ length: 3 }, (_, i) => line(`REF-${i + 1}`, 1)),
      );
      const read = await rowsRead(client, 'webhook_order');
      const ended = await client.query("SELECT webhook_id FROM webhook_order WHERE ended_at IS NOT NULL AND order_key LIKE 'REF-%'");
      await client.query('ROLLBACK');
      expect([...states.values()]).toEqual(['waiting', 'waiting', 'waiting']);
      expect(ended.rows.map((r) => r.webhook_id).sort()).toEqual(['evt_REF-1_1', 'evt_REF-2_1', 'evt_REF-3_1']);
      // The three ended rows, the three admitted, their lines' heads, the probes' own: not the 5,000.
      expect(read).toBeLessThan(100);
    } finally {
      await client.end();
      await fresh.drop();
    }
  });
});
