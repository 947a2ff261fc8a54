import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import type { DeliveryRecord } from '../../libs/delivery-log/index.js';
import { deliveryLogQueries, dropExpiredPartitions, openPglite, type Database } from '../../libs/delivery-store/index.js';
import { currentVersion, migrate, MIGRATIONS, REQUIRED_VERSION } from '../../libs/migrations/index.js';
import { ensurePartitionsFor, prepareRows, storeBatch } from '../../libs/delivery-store/materialise.js';
import { ensurePartition } from '../../libs/delivery-store/schema.js';
import { EmbeddedDatabaseInUseError, lockFolder } from '../../libs/delivery-store/folder-lock.js';

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
    await ensurePartitionsFor(session, [record]);
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
    expect(await migrate(db)).toEqual({ applied: [], version: REQUIRED_VERSION, newer: [] });
    expect(await currentVersion(db)).toBe(REQUIRED_VERSION);
  });

  it('keeps no GIN pending list on the references', async () => {
    const { rows } = await db.query<{ options: string[] | null }>(`SELECT reloptions AS options FROM pg_class WHERE relname = 'delivery_webhooks_refs'`);
    expect(rows).toEqual([{ options: ['fastupdate=off'] }]);
  });
});

/** One process at a time on a folder (test/integration/dev-database.test.ts runs the programs so). */
describe("the embedded database's folder lock", () => {
  const root = mkdtempSync(join(tmpdir(), 'pglite-lock-'));
  afterAll(() => rmSync(root, { recursive: true, force: true }));

  it('refuses a second opening in this process until the first is released, then opens', () => {
    const dir = join(root, 'twice');
    const release = lockFolder(dir);
    expect(() => lockFolder(dir)).toThrow(EmbeddedDatabaseInUseError);
    release();
    expect(existsSync(`${dir}.lock`)).toBe(false);
    lockFolder(dir)();
  });

  it('refuses a live process, naming it and the lock file', () => {
    const dir = join(root, 'live');
    writeFileSync(`${dir}.lock`, `${process.ppid}\n`);
    expect(() => lockFolder(dir)).toThrow(`is in use by process ${process.ppid} (`);
    expect(() => lockFolder(dir)).toThrow(`delete ${dir}.lock`);
    expect(readFileSync(`${dir}.lock`, 'utf8')).toBe(`${process.ppid}\n`);
  });

  it("takes over a lock whose process is gone, or that names this process's pid from a former life", () => {
    const gone = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))'], { encoding: 'utf8' }).stdout;
    for (const [name, pid] of [['gone', gone], ['restarted', String(process.pid)], ['garbled', 'not a pid']] as const) {
      const dir = join(root, name);
      writeFileSync(`${dir}.lock`, `${pid}\n`);
      const release = lockFolder(dir);
      expect(readFileSync(`${dir}.lock`, 'utf8')).toBe(`${process.pid}\n`);
      release();
      expect(existsSync(`${dir}.lock`)).toBe(false);
    }
  });
});
