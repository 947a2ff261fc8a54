import { openPostgres, type Queryable } from '../../libs/delivery-store/index.js';
import { respaceThrottled } from '../../libs/waits/index.js';
import { createTestDatabase } from '../support/postgres.js';

/**
 * An endpoint's queue of throttled waits is stretched by one UPDATE at each change of its adaptive rate
 * (a halving on a 429, a raise each second while it succeeds). On the merchant's due index it read
 * every future wait of the merchant, here another endpoint's 50,000 retries, to find the queue's 2,000.
 */
describe("a throttled endpoint's queue stretched to its new rate", () => {
  it("reads the endpoint's queue alone, not the merchant's other waits", async () => {
    const database = await createTestDatabase('throttled_queue_index');
    const db = openPostgres(database.url, { maxConnections: 1 });
    try {
      await database.query(
        `INSERT INTO webhook_waits (merchant_id, webhook_id, endpoint_id, attempt, due_at, pick_at, reason, headers)
         SELECT 'm_1', 'evt_' || n, CASE WHEN n <= 2000 THEN 'ep_a' ELSE 'ep_b' END, 0, now() + n * interval '10 ms', now() + n * interval '10 ms',
           CASE WHEN n <= 2000 THEN 'throttled' ELSE 'retry' END, '{}'::jsonb
         FROM generate_series(1, 52000) n`,
      );
      await database.query('ANALYZE webhook_waits');
      // The statement's plan, asked with the statement's own text and parameters, before it runs.
      const plans: unknown[] = [];
      const explaining: Queryable = {
        query: async (text: string, params?: unknown[]) => {
          if (text.includes('UPDATE webhook_waits')) plans.push((await db.query<{ 'QUERY PLAN': unknown }>(`EXPLAIN (FORMAT JSON) ${text}`, params)).rows[0]!['QUERY PLAN']);
          return db.query(text, params);
        },
      } as Queryable;
      await respaceThrottled(explaining, 'm_1', 'ep_a', 10, 5);
      expect(JSON.stringify(plans)).toContain('"Index Name":"webhook_waits_throttled"');
      // Stretched twice as far apart: the first of the queue, 10 ms from the seed's now, is about 20 ms out.
      const [first] = await database.query<{ ms: number }>("SELECT extract(epoch FROM due_at - now()) * 1000 AS ms FROM webhook_waits WHERE webhook_id = 'evt_2000'");
      expect(Number(first!.ms)).toBeGreaterThan(30_000);
    } finally {
      await db.close();
      await database.drop();
    }
  });
});
