import { jest } from '@jest/globals';
import { dropExpiredPartitions, openPostgres } from '../../libs/delivery-store/index.js';
import { dayOf, ensurePartition } from '../../libs/delivery-store/schema.js';
import { createTestDatabase } from '../support/postgres.js';

const DAY_MS = 86_400_000;

/**
 * The delivery log's retention is judged by PostgreSQL's clock, as its partitions are made: a leading
 * recorder whose host clock ran two days ahead dropped two days of records (and failures, whose
 * resends then answered 404) still inside DELIVERY_LOG_RETENTION.
 */
describe("the delivery log's retention, on a host whose clock runs ahead", () => {
  it('keeps the partitions still inside retention by the database clock', async () => {
    const database = await createTestDatabase('log_retention_clock');
    const db = openPostgres(database.url, { maxConnections: 1 });
    try {
      const { rows } = await db.query<{ now: Date }>('SELECT now() AS now');
      const dbNow = new Date(rows[0]!.now).getTime();
      const day = dayOf(new Date(dbNow - 29 * DAY_MS));
      await ensurePartition(db, 'delivery_records', day);
      // Only the host's Date runs two days ahead; PostgreSQL and the timers are as they are.
      jest.useFakeTimers({
        now: Date.now() + 2 * DAY_MS,
        doNotFake: ['hrtime', 'nextTick', 'performance', 'queueMicrotask', 'setImmediate', 'clearImmediate', 'setInterval', 'clearInterval', 'setTimeout', 'clearTimeout'],
      });
      let dropped: string[];
      try {
        dropped = await dropExpiredPartitions(db, 30 * DAY_MS);
      } finally {
        jest.useRealTimers();
      }
      expect(dropped).toEqual([]);
      expect(await database.query('SELECT relname FROM pg_class WHERE relname = $1', [`delivery_records_${day.replaceAll('-', '')}`])).toHaveLength(1);
    } finally {
      await db.close();
      await database.drop();
    }
  });
});
