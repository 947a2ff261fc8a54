import { openPostgres, type Queryable } from '../../libs/delivery-store/index.js';
import { OrderStore } from '../../libs/ordering/index.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';

/**
 * A copy the broker gives again looks up its webhook's open places (OrderGate.openPlaces): by
 * merchant and webhook, with no endpoint. Seen failing without migration 0036 (the plan read the
 * whole table, a Seq Scan: no index fits without the endpoint).
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
