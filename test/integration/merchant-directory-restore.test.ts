import pg from 'pg';
import { type Database, openPostgres } from '../../libs/delivery-store/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { capturingLogger } from '../support/capturing-logger.js';
import { deleteMerchantData, MerchantSettings, PgMerchantDirectory, SecretBox } from '../../libs/merchants/index.js';
import { TEST_SECRETS_KEY } from '../support/dispatcher-program.js';
import { migrateDatabase } from '../support/postgres.js';
import { PrivatePostgres } from '../support/private-postgres.js';
import { waitFor } from '../support/wait.js';
import { patchFirst, putWithEndpoint, rotateFirst } from '../support/merchant-endpoints.js';

/**
 * docs/production.md, "Backups and restore", walked on a PostgreSQL of the test's own: a program
 * runs on while the database is restored from a backup behind it, and (no restart) within 30 s it
 * serves what the restored database holds: a change made after the backup is undone (a secret
 * rotated since is the old one again), a merchant made since is gone, one deleted since is back.
 * The transaction ids went back with the restore, and writes after it carried them past the
 * program's cursor before it looked: the cursor alone would have missed it all.
 */
describe('a running program across a restore of its database', () => {
  let server: PrivatePostgres | undefined;
  let admin: Database;
  let program: PgMerchantDirectory;
  let programDb: Database;
  const lines: Array<Record<string, unknown>> = [];

  beforeAll(async () => {
    server = await PrivatePostgres.start();
    if (!server) return;
    admin = openPostgres(server.url);
    await migrateDatabase(server.url);
    programDb = openPostgres(server.url, { applicationName: 'restore-test program' });
    const logger = capturingLogger(lines);
    // The default poll: what the runbook promises is what a program as deployed does.
    program = new PgMerchantDirectory(programDb, new SecretBox(Buffer.from(TEST_SECRETS_KEY, 'base64')), logger);
  }, 120_000);

  afterAll(async () => {
    await program?.close();
    await programDb?.close();
    await admin?.close();
    await server?.stop();
  });

  /** The operator's writes (the admin API, the CLI), each on a connection that ends with it: the server is stopped under them. */
  async function operator<T>(work: (settings: MerchantSettings, db: Database) => Promise<T>): Promise<T> {
    const db = openPostgres(server!.url);
    const directory = new PgMerchantDirectory(db, new SecretBox(Buffer.from(TEST_SECRETS_KEY, 'base64')), silentLogger());
    try {
      await directory.start();
      return await work(new MerchantSettings(directory, { allowHttp: false, allowPrivateTargets: false }), db);
    } finally {
      await directory.close();
      await db.close();
    }
  }

  const put = (settings: MerchantSettings, id: string, url: string) => putWithEndpoint(settings, id, { publicKey: `pk_${id}_000000`, url });

  it('serves what the restored database holds, within 30 s, without a restart', async () => {
    if (!server) return console.warn('no PostgreSQL binaries (PG_BIN_DIR): skipped');
    await operator(async (settings) => {
      await put(settings, 'm_kept', 'https://kept.example.com/');
      await put(settings, 'm_rotated', 'https://rotated.example.com/');
      await put(settings, 'm_deleted', 'https://deleted.example.com/');
    });
    await program.start();
    const before = program.byId('m_rotated')!.endpoints[0]!.secret;

    const backup = await server.backup();
    // After the backup: a rotation, a merchant made, one deleted; the running program sees each.
    await operator(async (settings, db) => {
      await rotateFirst(settings, 'm_rotated', 0);
      await put(settings, 'm_new', 'https://new.example.com/');
      await deleteMerchantData(db, 'm_deleted', { actor: 'test' });
    });
    await waitFor('the program to see the changes', () => program.byId('m_rotated')?.endpoints[0]?.secret !== before && program.byId('m_new') && !program.byId('m_deleted'), 30_000);
    // Transaction ids the restore takes back: the program's cursor is past them.
    await burnTransactionIds(server.url, 200);

    const restoredAt = Date.now();
    await server.restore(backup);
    // Writes after the restore carry the transaction ids past where the program's cursor was
    // before it looks again; one of them changes a merchant.
    await burnTransactionIds(server.url, 400);
    await operator((settings) => patchFirst(settings, 'm_kept', { url: 'https://kept-after.example.com/' }));

    await waitFor('the program to serve the restored database', () => !program.byId('m_new') && program.byId('m_deleted') && program.byId('m_rotated')?.endpoints[0]?.secret === before, 30_000, 100);
    expect(Date.now() - restoredAt).toBeLessThan(30_000);
    await waitFor('and the write made after the restore', () => program.byId('m_kept')?.endpoints[0]?.url === 'https://kept-after.example.com/', 30_000, 100);
    expect(program.byPublicKey('pk_m_new_000000')).toBeUndefined();
    expect(program.byPublicKey('pk_m_deleted_000000')?.id).toBe('m_deleted');
    // What the runbook tells the operator to look for in each program's log.
    expect(lines).toContainEqual(expect.objectContaining({ level: 'info', message: 'merchant directory loads every merchant again' }));
    expect(program.reloads).toBeGreaterThanOrEqual(1);
  }, 180_000);
});

/** `count` transactions that each take an id and commit. */
async function burnTransactionIds(url: string, count: number): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    for (let i = 0; i < count; i++) await client.query('SELECT pg_current_xact_id()');
  } finally {
    await client.end();
  }
}
