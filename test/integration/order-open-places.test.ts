import pg from 'pg';
import { openPostgres, type Queryable } from '../../libs/delivery-store/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { OrderGate, OrderStore } from '../../libs/ordering/index.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';

/**
 * A copy the broker gives again looks up its webhook's open places (OrderGate.openPlaces): by
 * merchant and webhook, with no endpoint. Seen failing without migration 0036 (the plan read the
 * whole table, a Seq Scan: no index fits without the endpoint), and, with the gate asking again beside
 * a look-up that timed out (gate.ts before its lookUps map), on a second query while the first ran.
 */
let database: TestDatabase;
beforeAll(async () => {
  database = await createTestDatabase('order_open_places');
  // A merchant's open places across five endpoints and 2,000 keys, as behind a dead endpoint's head.
  await database.query(
    `INSERT INTO webhook_order (merchant_id, endpoint_id, order_key, webhook_id)
     SELECT 'm_1', 'ep_' || (n % 5), 'TX-' || (n % 2000), 'evt_' || n FROM generate_series(1, 50000) n`,
  );
  await database.query('ANALYZE webhook_order');
});
afterAll(() => database.drop());

it("finds a webhook's open places by its own rows, not by reading the merchant's", async () => {
  const db = openPostgres(database.url, { maxConnections: 1 });
  try {
    // The statement's plan, asked with its own text and parameters, before it runs.
    const plans: unknown[] = [];
    const explaining = {
      query: async (text: string, params?: unknown[]) => {
        plans.push((await db.query<{ 'QUERY PLAN': unknown }>(`EXPLAIN (FORMAT JSON) ${text}`, params)).rows[0]!['QUERY PLAN']);
        return db.query(text, params);
      },
    } as Queryable;
    expect(await new OrderStore(explaining).openPlaces('m_1', 'evt_7', 'TX-7')).toEqual(['ep_2']);
    expect(JSON.stringify(plans)).toContain('"Index Name":"webhook_order_open"');
  } finally {
    await db.close();
  }
});

it('asks PostgreSQL once while a look-up that timed out still runs: the copy asking again waits for its answer', async () => {
  const db = openPostgres(database.url, { maxConnections: 3 });
  let asked = 0;
  const counting = { query: (text: string, params?: unknown[]) => (asked++, db.query(text, params)) } as Queryable;
  const gate = new OrderGate(new OrderStore(counting), silentLogger());
  // A slow PostgreSQL: the table locked by a session of its own until the test lets go.
  const locker = new pg.Client({ connectionString: database.url });
  await locker.connect();
  try {
    await locker.query('BEGIN');
    await locker.query('LOCK TABLE webhook_order IN ACCESS EXCLUSIVE MODE');
    await expect(gate.openPlaces('m_1', 'evt_7', 'TX-7')).rejects.toThrow('no answer in 2000 ms');
    const again = gate.openPlaces('m_1', 'evt_7', 'TX-7');
    expect(asked).toBe(1);
    await locker.query('COMMIT');
    expect(await again).toEqual(['ep_2']);
    // Answered, the next look-up asks afresh.
    expect(await gate.openPlaces('m_1', 'evt_7', 'TX-7')).toEqual(['ep_2']);
    expect(asked).toBe(2);
  } finally {
    await locker.end();
    gate.close();
    await db.close();
  }
});
