import { type Database, openPostgres } from '../../libs/delivery-store/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { MerchantSettings, PgMerchantDirectory, SecretBox } from '../../libs/merchants/index.js';
import { TEST_SECRETS_KEY } from '../support/dispatcher-program.js';
import { patchFirst, putWithEndpoint } from '../support/merchant-endpoints.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';
import { waitFor } from '../support/wait.js';

/**
 * A replica loads every merchant again when its database changed under it (restored, failed over,
 * restarted). A write it answered while the load read its pages was undone by those pages (read
 * before the write): it served the older version, its ETag gone back, until a later poll. The cache's
 * version never goes back (docs/DESIGN.md, "Merchant directory").
 */
describe("a replica's full load of the merchants while it writes one", () => {
  let db: TestDatabase;
  let real: Database;

  beforeAll(async () => {
    db = await createTestDatabase('merchant_reload_write');
    real = openPostgres(db.url);
  });

  afterAll(async () => {
    await real?.close();
    await db?.drop();
  });

  it('keeps the version its own write made, not the older one the pages read before it', async () => {
    let reloadNext = false;
    let pagesHeld: Promise<void> | undefined;
    let release!: () => void;
    let pageReached!: () => void;
    let releaseChanges!: () => void;
    const changesHeld = new Promise<void>((resolve) => (releaseChanges = resolve));
    const reached = new Promise<void>((resolve) => (pageReached = resolve));
    // The database as the replica sees it: the next look at its history says another one; the load's pages wait.
    const database: Database = {
      ...real,
      query: (async (text: string, params?: unknown[]) => {
        const result = await real.query(text, params as never);
        if (reloadNext && text.includes('pg_snapshot_xmin')) {
          reloadNext = false;
          (result.rows[0] as { history: string }).history = 'another database';
          pagesHeld = new Promise<void>((resolve) => (release = resolve));
        } else if (pagesHeld && text.includes('FROM merchants WHERE id > $1')) {
          pageReached();
          await pagesHeld;
        } else if (pagesHeld && text.includes('FROM merchants WHERE change_xid')) {
          // The write's notification reads its change again right after the load: held, so that
          // what the load left is what the replica serves meanwhile.
          await changesHeld;
        }
        return result;
      }) as Database['query'],
    };
    const directory = new PgMerchantDirectory(database, new SecretBox(Buffer.from(TEST_SECRETS_KEY, 'base64')), silentLogger(), { pollIntervalMs: 3_600_000 });
    await directory.start();
    try {
      const settings = new MerchantSettings(directory, { allowHttp: true, allowPrivateTargets: true });
      await putWithEndpoint(settings, 'm_reload', { publicKey: 'pk_reload_0001', url: 'http://127.0.0.1:1/hook' });
      const before = directory.versionOf('m_reload')!;
      reloadNext = true;
      const polled = directory.poll();
      await reached;
      await patchFirst(settings, 'm_reload', { description: 'written during the load' });
      expect(directory.versionOf('m_reload')).toBe(before + 1);
      release();
      await waitFor('the load done', () => directory.reloads === 1, 5_000);
      expect(directory.versionOf('m_reload')).toBe(before + 1);
      expect(directory.byId('m_reload')?.endpoints[0]?.description).toBe('written during the load');
      releaseChanges();
      await polled;
      expect(directory.versionOf('m_reload')).toBe(before + 1);
    } finally {
      release?.();
      releaseChanges();
      await directory.close();
    }
  });
});
