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

  it('keeps no GIN pending list on the references', async () => {
    const session = await db.session();
    await ensureSchema(session);
    const { rows } = await db.query<{ options: string[] | null }>(`SELECT reloptions AS options FROM pg_class WHERE relname = 'delivery_webhooks_refs'`);
    expect(rows).toEqual([{ options: ['fastupdate=off'] }]);
    await session.close();
  });

  it('turns a database made before (webhooks by first-seen day) into one row per webhook, feed positions past the old ones', async () => {
    const old = await openPglite(mkdtempSync(join(tmpdir(), 'pglite-old-')));
    try {
      await old.query(`CREATE TABLE delivery_log_offsets (stream text PRIMARY KEY, next_offset bigint NOT NULL, caught_up_at timestamptz NOT NULL DEFAULT now())`);
      await old.query(`INSERT INTO delivery_log_offsets (stream, next_offset) VALUES ('s', 7)`);
      await old.query('CREATE SEQUENCE delivery_feed_seq');
      await old.query(`CREATE TABLE delivery_webhooks (merchant_id text NOT NULL, webhook_id text NOT NULL, first_seen_at timestamptz NOT NULL,
        seq bigint NOT NULL DEFAULT nextval('delivery_feed_seq'), event text NOT NULL, refs text[] NOT NULL, merchant_refs text[] NOT NULL, payload jsonb,
        status text NOT NULL, attempts integer NOT NULL, first_attempt_at timestamptz, last_attempt_at timestamptz, last_http_status integer,
        last_error text, next_attempt_at timestamptz, last_record_at timestamptz NOT NULL, PRIMARY KEY (merchant_id, webhook_id, first_seen_at))
        PARTITION BY RANGE (first_seen_at)`);
      await old.query(`CREATE INDEX delivery_webhooks_newest ON delivery_webhooks (merchant_id, first_seen_at DESC, webhook_id DESC)`);
      await old.query(`CREATE INDEX delivery_webhooks_refs ON delivery_webhooks USING gin (merchant_refs)`);
      await old.query(`CREATE TABLE delivery_webhooks_20261101 PARTITION OF delivery_webhooks FOR VALUES FROM ('2026-11-01') TO ('2026-11-02')`);
      await old.query(`CREATE TABLE delivery_webhooks_20261102 PARTITION OF delivery_webhooks FOR VALUES FROM ('2026-11-02') TO ('2026-11-03')`);
      // One webhook seen twice (a redelivered upstream message): retrying on the first day, delivered on the second.
      const row = `INSERT INTO delivery_webhooks (merchant_id, webhook_id, first_seen_at, event, refs, merchant_refs, payload, status, attempts, last_record_at)
        VALUES ('m_1', $1, $2, 'payout', ARRAY['po-1'], ARRAY['m_1' || chr(31) || 'po-1'], '{"event":"payout"}', $3, $4, $5)`;
      await old.query(row, ['wh_1', '2026-11-01T10:00:00Z', 'retrying', 2, '2026-11-01T10:00:05Z']);
      await old.query(row, ['wh_1', '2026-11-02T10:00:00Z', 'delivered', 1, '2026-11-02T10:00:05Z']);
      await old.query(row, ['wh_2', '2026-11-02T11:00:00Z', 'failed', 3, '2026-11-02T11:00:05Z']);

      const session = await old.session();
      await ensureSchema(session);
      const log = deliveryLogQueries(old);
      expect(await log.getWebhook('m_1', 'wh_1')).toMatchObject({ status: 'delivered', attempts: 3, firstSeenAt: '2026-11-01T10:00:00.000Z' });
      expect((await log.listWebhooks('m_1', { limit: 10 })).webhooks.map((w) => w.webhookId)).toEqual(['wh_2', 'wh_1']);
      const feed = await log.feed('m_1', undefined, 10);
      expect(feed.events.map((e) => e.webhookId)).toEqual(['wh_1', 'wh_2']);
      const { rows } = await old.query<{ seq_base: string }>(`SELECT seq_base FROM delivery_log_offsets WHERE stream = 's'`);
      expect(Number(rows[0]!.seq_base)).toBeGreaterThan(Number(feed.nextCursor));
      const indexes = await old.query<{ name: string }>(`SELECT indexname AS name FROM pg_indexes WHERE tablename = 'delivery_webhooks' ORDER BY 1`);
      expect(indexes.rows.map((r) => r.name)).toEqual(expect.arrayContaining(['delivery_webhooks_expiry', 'delivery_webhooks_feed', 'delivery_webhooks_newest', 'delivery_webhooks_refs', 'delivery_webhooks_status']));
      expect((await log.listWebhooks('m_1', { limit: 10, reference: 'po-1' })).webhooks).toHaveLength(2);
      // Idempotent: a second start changes nothing.
      await ensureSchema(session);
      expect((await log.listWebhooks('m_1', { limit: 10 })).webhooks).toHaveLength(2);
      await session.close();
    } finally {
      await old.close();
    }
  }, 60_000);
});
