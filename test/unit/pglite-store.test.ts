import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import type { DeliveryRecord } from '../../libs/delivery-log/index.js';
import { deliveryLogQueries, dropExpiredPartitions, openPglite, type Database } from '../../libs/delivery-store/index.js';
import { currentVersion, migrate, MIGRATIONS, REQUIRED_VERSION } from '../../libs/migrations/index.js';
import { ensurePartitionsFor, prepareRows, storeBatch } from '../../libs/delivery-store/materialise.js';
import { ensurePartition } from '../../libs/delivery-store/schema.js';

/** Development mode's embedded database runs the same schema and statements as PostgreSQL. */
describe('the delivery log on the embedded PGlite of development mode', () => {
  const dir = mkdtempSync(join(tmpdir(), 'pglite-'));
  let db: Database;

  beforeAll(async () => {
    db = await openPglite(dir);
    // As development mode does: no operator runs `webhooks migrate` on it.
    expect((await migrate(db)).applied.length).toBe(MIGRATIONS.length);
  }, 60_000);

  afterAll(async () => {
    await db?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('stores a batch with its offset, answers the three reads, and drops expired partitions', async () => {
    const session = await db.session();
    const at = new Date().toISOString();
    const record: DeliveryRecord = {
      id: randomUUID(), at, webhookId: 'wh_1', merchantId: 'm_1', event: 'payout', references: ['po-1'],
      payload: JSON.stringify({ event: 'payout', data: { reference: 'po-1' } }), firstSeenAt: at, outcome: 'delivered', attemptNumber: 1,
      attempt: { startedAt: at, durationMs: 3, httpStatus: 200 },
    };
    await ensurePartitionsFor(session, [record], session);
    await storeBatch(session, 's', prepareRows([record, record]), 1, new Date());
    const log = deliveryLogQueries(db);
    expect((await log.listWebhooks('m_1', { limit: 10, reference: 'po-1' })).webhooks).toMatchObject([{ webhookId: 'wh_1', status: 'delivered', attempts: 1 }]);
    expect((await log.getWebhook('m_1', 'wh_1'))?.records).toHaveLength(1);
    expect((await log.listWebhookDetails('m_1', { limit: 10, reference: 'po-1' })).webhooks).toEqual([await log.getWebhook('m_1', 'wh_1')]);
    expect((await log.feed('m_1', undefined, 10)).events).toHaveLength(1);
    // Everything is older than a retention of "0 days ago + 2 days" in the future.
    const dropped = await dropExpiredPartitions(db, 0, new Date(Date.now() + 2 * 86_400_000));
    expect(dropped.length).toBe(1);
    expect((await log.listWebhooks('m_1', { limit: 10 })).webhooks).toEqual([]);
  }, 60_000);

  it('migrates once: a second run applies nothing', async () => {
    expect(await migrate(db)).toEqual({ applied: [], version: REQUIRED_VERSION });
    expect(await currentVersion(db)).toBe(REQUIRED_VERSION);
  });

  it('keeps no GIN pending list on the references', async () => {
    const { rows } = await db.query<{ options: string[] | null }>(`SELECT reloptions AS options FROM pg_class WHERE relname = 'delivery_webhooks_refs'`);
    expect(rows).toEqual([{ options: ['fastupdate=off'] }]);
  });
});
