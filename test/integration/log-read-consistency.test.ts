/**
 * What a merchant reads of its log agrees with what was recorded whatever the server around it
 * does: a PostgreSQL whose time zone is not UTC (the portal's hours), retention deleting expired
 * webhooks in slices while a merchant pages through the feed, and a record landing between two
 * pages of the list whose first-seen time another clock stamped.
 */
import { randomUUID } from 'node:crypto';
import type { DeliveryRecord } from '../../libs/delivery-log/index.js';
import { type Database, deliveryLogQueries, dropExpiredPartitions, openPostgres, type Queryable, type Session } from '../../libs/delivery-store/index.js';
import { ensurePartitionsFor, prepareRows, storeBatch } from '../../libs/delivery-store/materialise.js';
import { endpointHealth } from '../../libs/portal/health.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';

const HOUR_MS = 3_600_000;
const DAY_MS = 86_400_000;

describe('the log read back as it was recorded', () => {
  let db: TestDatabase;
  let database: Database;
  let session: Session;
  let offset = 0;

  beforeAll(async () => {
    db = await createTestDatabase('log_read_consistency');
    // A server set up in India: +05:30, not a whole number of hours from UTC. The pool below connects after this.
    await db.query(`ALTER DATABASE ${db.name} SET timezone TO 'Asia/Kolkata'`);
    database = openPostgres(db.url);
    session = await database.session();
  });

  afterAll(async () => {
    await session?.close();
    await database?.close();
    await db?.drop();
  });

  const delivered = (merchantId: string, webhookId: string, endpointId: string, at: number): DeliveryRecord => {
    const time = new Date(at).toISOString();
    return {
      id: randomUUID(), at: time, webhookId, merchantId, endpointId, event: 'payout', references: [`PO-${webhookId}`],
      payload: JSON.stringify({ event: 'payout', data: { reference: `PO-${webhookId}` } }), firstSeenAt: time,
      outcome: 'delivered', attemptNumber: 1, attempt: { startedAt: time, durationMs: 4, httpStatus: 200 },
    };
  };

  /** One stream message further on: the records' feed positions follow their order in the batch. */
  async function store(batch: DeliveryRecord[]): Promise<void> {
    await ensurePartitionsFor(session, batch);
    offset++;
    await storeBatch(session, 'consistency', prepareRows(batch, batch.map((_, i) => offset * 100_000 + i)), offset + 1, null);
  }

  it("counts each webhook in the UTC hour it was first seen in, whatever the database's time zone", async () => {
    const hourNow = Math.floor(Date.now() / HOUR_MS) * HOUR_MS;
    // Ten minutes into each of 20 past hours: in +05:30 that is the previous local hour's second half.
    const seen = Array.from({ length: 20 }, (_, i) => hourNow - (i + 1) * HOUR_MS + 10 * 60_000);
    await store(seen.map((at, i) => delivered('m_zone', `wh_zone_${i}`, 'ep_zone', at)));

    const health = await endpointHealth(database, 'm_zone');
    const byHour = new Map(health.hours.map((h) => [h.hour, h.delivered]));
    expect(seen.map((at) => [new Date(at).toISOString(), byHour.get(new Date(Math.floor(at / HOUR_MS) * HOUR_MS).toISOString())])).toEqual(
      seen.map((at) => [new Date(at).toISOString(), 1]),
    );
    expect(health.hours.reduce((n, h) => n + h.delivered, 0)).toBe(health.delivered);
  });

  it('never gives a feed reader an event again while retention deletes expired webhooks in slices', async () => {
    // 9,999 expired webhooks of another merchant, then one of ours sent to two endpoints: the
    // 10,000th and 10,001st expired rows (by time, insertion and key), either side of a slice's end.
    const old = Date.now() - 40 * DAY_MS;
    const bulk = Array.from({ length: 9_999 }, (_, i) => delivered('m_bulk', `wh_bulk_${String(i).padStart(4, '0')}`, 'ep_bulk', old + i));
    await store([...bulk, delivered('m_feed', 'wh_zz_fan', 'ep_a', old + 20_000), delivered('m_feed', 'wh_zz_fan', 'ep_b', old + 20_001)]);
    const log = deliveryLogQueries(database);
    const read = await log.feed('m_feed', undefined, 500);
    expect(read.events.map((e) => e.webhookId)).toEqual(['wh_zz_fan']);
    // The reader has seen the event: its cursor is past it.
    const cursor = read.nextCursor;

    const seenBetweenSlices: string[][] = [];
    let slices = 0;
    const watched: Queryable = {
      async query(text, params) {
        const answer = await database.query(text, params);
        if (text.includes('DELETE FROM delivery_webhooks')) {
          slices++;
          seenBetweenSlices.push((await log.feed('m_feed', cursor, 500)).events.map((e) => e.webhookId));
        }
        return answer as never;
      },
    };
    await dropExpiredPartitions(watched, 30 * DAY_MS);
    // The premise: more than one slice.
    expect(slices).toBeGreaterThan(1);
    expect(seenBetweenSlices.flat()).toEqual([]);
    expect((await db.query<{ n: string }>("SELECT count(*) AS n FROM delivery_webhooks WHERE merchant_id IN ('m_bulk', 'm_feed')"))[0]!.n).toBe('0');
  });
  it('never lists a delivery again on a later page when a record stamped by another clock lands between the pages', async () => {
    const now = Date.now();
    const at = (minutesAgo: number) => now - minutesAgo * 60_000;
    // wh_b is held for order per reference: its first record is a deferral, stamped by its dispatcher's clock.
    await store([delivered('m_pages', 'wh_a', 'ep_p', at(10)), { ...delivered('m_pages', 'wh_b', 'ep_p', at(5)), outcome: 'deferred', attemptNumber: 0, reason: 'ordered', attempt: undefined }, delivered('m_pages', 'wh_c', 'ep_p', at(1))]);
    const log = deliveryLogQueries(database);
    const first = await log.listWebhooks('m_pages', { limit: 2 });
    expect(first.webhooks.map((w) => w.webhookId)).toEqual(['wh_c', 'wh_b']);
    // The webhook before it ends: webhook_order_step stamps its wait's x-first-seen-at with PostgreSQL's
    // now(), here two minutes behind that dispatcher's clock, and its attempt's record carries it.
    await store([{ ...delivered('m_pages', 'wh_b', 'ep_p', at(4)), firstSeenAt: new Date(at(7)).toISOString() }]);
    const second = await log.listWebhooks('m_pages', { limit: 2, cursor: first.nextCursor! });
    expect(second.webhooks.map((w) => w.webhookId)).toEqual(['wh_a']);
    // It shows the first sight its first record gave it, delivered.
    expect((await log.getWebhook('m_pages', 'wh_b'))).toMatchObject({ firstSeenAt: new Date(at(5)).toISOString(), status: 'delivered' });
  });
});
