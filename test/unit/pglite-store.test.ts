import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import type { DeliveryRecord } from '../../libs/delivery-log/index.js';
import { deliveryLogQueries, dropExpiredPartitions, ensureSchema, openPglite, type Database } from '../../libs/delivery-store/index.js';
import { ensurePartitionsFor, prepareRows, storeBatch } from '../../libs/delivery-store/materialise.js';
import { ensurePartition } from '../../libs/delivery-store/schema.js';

/** Development mode's embedded database runs the same schema and statements as PostgreSQL. */
describe('the delivery log on the embedded PGlite of development mode', () => {
  const dir = mkdtempSync(join(tmpdir(), 'pglite-'));
  let db: Database;

  beforeAll(async () => {
    db = await openPglite(dir);
  }, 60_000);

  afterAll(async () => {
    await db?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('stores a batch with its offset, answers the three reads, and drops expired partitions', async () => {
    const session = await db.session();
    await ensureSchema(session);
    const at = new Date().toISOString();
    const record: DeliveryRecord = {
      id: randomUUID(), at, webhookId: 'wh_1', merchantId: 'm_1', event: 'payout', references: ['po-1'],
      payload: { event: 'payout', data: { reference: 'po-1' } }, firstSeenAt: at, outcome: 'delivered', attemptNumber: 1,
      attempt: { startedAt: at, durationMs: 3, httpStatus: 200 },
    };
    await ensurePartitionsFor(session, [record], session);
    await storeBatch(session, 's', prepareRows([record, record]), 1, true);
    const log = deliveryLogQueries(db);
    expect((await log.listWebhooks('m_1', { limit: 10, reference: 'po-1' })).webhooks).toMatchObject([{ webhookId: 'wh_1', status: 'delivered', attempts: 1 }]);
    expect((await log.getWebhook('m_1', 'wh_1'))?.records).toHaveLength(1);
    expect((await log.listWebhookDetails('m_1', { limit: 10, reference: 'po-1' })).webhooks).toEqual([await log.getWebhook('m_1', 'wh_1')]);
    expect((await log.feed('m_1', undefined, 10)).events).toHaveLength(1);
    // Everything is older than a retention of "0 days ago + 2 days" in the future.
    const dropped = await dropExpiredPartitions(db, 0, new Date(Date.now() + 2 * 86_400_000));
    expect(dropped.length).toBe(2);
    expect((await log.listWebhooks('m_1', { limit: 10 })).webhooks).toEqual([]);
  }, 60_000);

  it('keeps no GIN pending list on the references, in a new database and in one made before', async () => {
    const session = await db.session();
    await ensureSchema(session);
    const fastupdate = async () =>
      (await db.query<{ name: string; options: string[] | null }>(
        `SELECT c.relname AS name, c.reloptions AS options FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
         JOIN pg_class p ON p.oid = i.inhparent WHERE p.relname = 'delivery_webhooks_refs' ORDER BY 1`,
      )).rows;
    const day = new Date().toISOString().slice(0, 10);
    await ensurePartition(db, 'delivery_webhooks', day);
    expect(await fastupdate()).toEqual([expect.objectContaining({ options: ['fastupdate=off'] })]);

    // A database made before: the index without the option, a day's index with the default.
    await db.query('DROP INDEX delivery_webhooks_refs');
    await db.query('CREATE INDEX delivery_webhooks_refs ON delivery_webhooks USING gin (merchant_refs)');
    expect((await fastupdate()).map((row) => row.options)).toEqual([null]);
    await ensureSchema(session);
    expect((await fastupdate()).map((row) => row.options)).toEqual([['fastupdate=off']]);
    // And a new day's index, which takes the parent's default.
    const tomorrow = new Date(Date.now() + 86_400_000).toISOString().slice(0, 10);
    await ensurePartition(db, 'delivery_webhooks', tomorrow);
    expect((await fastupdate()).map((row) => row.options)).toEqual([['fastupdate=off'], ['fastupdate=off']]);
    await session.close();
  });
});

