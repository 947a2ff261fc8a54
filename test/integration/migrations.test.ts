/**
 * `webhooks migrate` on the real PostgreSQL: numbered files applied once each, recorded in
 * schema_migrations; safe to run twice and from two machines at once; a file changed after it ran,
 * or a schema newer than this release knows, refused before anything runs.
 */
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openPostgres, type Database } from '../../libs/delivery-store/index.js';
import { checksumOf, currentVersion, fileOf, MIGRATIONS, migrate, type Migration, migrationOf, readMigrations, REQUIRED_VERSION, SQL_DIR } from '../../libs/migrations/index.js';
import { ENDPOINT_ID, PgMerchantDirectory, SecretBox } from '../../libs/merchants/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { runCliInProcess } from '../support/cli.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';
import { freePort } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';
import { TEST_SECRETS_KEY } from '../support/dispatcher-program.js';

describe('webhooks migrate', () => {
  const made: TestDatabase[] = [];
  const opened: Database[] = [];
  /** An empty database of this test's own. */
  const empty = async (label: string) => {
    const db = await createTestDatabase(label, undefined, { migrated: false });
    made.push(db);
    return db;
  };
  const open = (url: string) => {
    const database = openPostgres(url, { maxConnections: 2 });
    opened.push(database);
    return database;
  };

  afterAll(async () => {
    for (const database of opened) await database.close();
    for (const db of made) await db.drop();
  });

  it('applies every migration on an empty database, and nothing the second time', async () => {
    const db = await empty('migrate_twice');
    const first = await runCliInProcess({ DATABASE_URL: db.url }, ['migrate']);
    expect(first).toMatchObject({ code: 0 });
    expect(first.stdout).toContain('applied 0001_initial.sql');
    expect(first.stdout).toContain(`schema version ${REQUIRED_VERSION}`);
    const tables = await db.query<{ n: number }>("SELECT count(*)::int AS n FROM pg_tables WHERE schemaname = 'public'");
    const second = await runCliInProcess({ DATABASE_URL: db.url }, ['migrate']);
    expect(second).toMatchObject({ code: 0, stdout: `schema version ${REQUIRED_VERSION}: nothing to apply\n` });
    expect(await db.query("SELECT count(*)::int AS n FROM pg_tables WHERE schemaname = 'public'")).toEqual(tables);
    expect(await db.query('SELECT version, name, checksum FROM schema_migrations ORDER BY version')).toEqual(
      MIGRATIONS.map((m) => ({ version: m.version, name: m.name, checksum: m.checksum })),
    );
  });

  it('runs from two machines at once on an empty database: both exit 0, each migration applied once', async () => {
    const db = await empty('migrate_race');
    const [a, b] = await Promise.all([runCliInProcess({ DATABASE_URL: db.url }, ['migrate']), runCliInProcess({ DATABASE_URL: db.url }, ['migrate'])]);
    expect([a.code, b.code]).toEqual([0, 0]);
    // One applied it; the other waited for the lock (saying so, if the first held it by then), then found nothing to do.
    expect(a.stderr + b.stderr).toMatch(/^(webhooks: waiting for another webhooks migrate on this database to finish\n)?$/);
    expect([a.stdout, b.stdout].filter((out) => out.includes('applied 0001_initial.sql'))).toHaveLength(1);
    expect(await db.query('SELECT version FROM schema_migrations')).toEqual(MIGRATIONS.map((m) => ({ version: m.version })));
  });

  it('serialises runs that overlap for sure (a slow migration): each applied once, every run succeeds', async () => {
    const db = await empty('migrate_overlap');
    const slow: Migration = { version: 1, name: 'slow', sql: 'SELECT pg_sleep(0.5);\nCREATE TABLE slow (a int);', checksum: 'x' };
    const runs = await Promise.all([1, 2, 3].map(() => migrate(open(db.url), [slow])));
    expect(runs.map((run) => run.applied.length).sort()).toEqual([0, 0, 1]);
    expect(await db.query('SELECT version FROM schema_migrations')).toEqual([{ version: 1 }]);
  });

  /** Holds the lock a run of migrate holds for its whole run, as another machine's run would. */
  const holdMigrateLock = async (url: string) => {
    const holder = await open(url).session();
    await holder.query("SELECT pg_advisory_lock(hashtext('webhooks-schema-migrations'))");
    return { release: () => holder.close() };
  };
  /** A run of migrate waiting for the lock, for at least `ms`. */
  const waitingForLock = async (db: TestDatabase, ms = 0) =>
    (await db.query("SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event = 'advisory' AND now() - query_start >= $1::int * interval '1 ms'", [ms])).length > 0;

  it('says once, on stderr, while it waits for another run of migrate, and nothing when it does not wait', async () => {
    const db = await empty('migrate_waits');
    const lock = await holdMigrateLock(db.url);
    let saidWhileWaiting = '';
    const running = runCliInProcess({ DATABASE_URL: db.url }, ['migrate'], { onStderr: (text) => (saidWhileWaiting = text) });
    try {
      await waitFor('migrate waiting for the lock', () => waitingForLock(db));
      await waitFor('the line saying it waits', () => saidWhileWaiting !== '', 5_000);
    } finally {
      await lock.release();
    }
    const result = await running;
    expect(result).toMatchObject({ code: 0, stderr: 'webhooks: waiting for another webhooks migrate on this database to finish\n' });
    expect(saidWhileWaiting).toBe(result.stderr);
    expect(result.stdout).toContain('applied 0001_initial.sql');
    // Not waiting: not a word on stderr.
    expect(await runCliInProcess({ DATABASE_URL: db.url }, ['migrate'])).toMatchObject({ code: 0, stderr: '' });
  });

  it("waits for another run however long it takes, even where the database or the role sets a lock_timeout (a DBA's ALTER ... SET)", async () => {
    const db = await empty('migrate_lock_timeout');
    await db.query(`ALTER DATABASE ${db.name} SET lock_timeout = '1s'`);
    const text = 'CREATE TABLE t (a int);';
    const lock = await holdMigrateLock(db.url);
    let settled = false;
    const running = migrate(open(db.url), [{ version: 1, name: 'first', sql: text, checksum: checksumOf(text) }]).then(
      () => 'applied',
      (err: Error) => err.message,
    ).finally(() => (settled = true));
    try {
      // Past the database's lock_timeout, still waiting (or cut short: the check below says how).
      await waitFor('migrate waiting longer than lock_timeout', async () => settled || (await waitingForLock(db, 1_500)));
    } finally {
      await lock.release();
    }
    expect(await running).toBe('applied');
    expect(await currentVersion(open(db.url))).toBe(1);
  });

  it("has no statement timeout, even where the database or the role sets one (a DBA's ALTER ... SET): it waits for another run, and a migration takes what it takes", async () => {
    const db = await empty('migrate_statement_timeout');
    await db.query(`ALTER DATABASE ${db.name} SET statement_timeout = '1s'`);
    const lock = await holdMigrateLock(db.url);
    let settled = false;
    const running = runCliInProcess({ DATABASE_URL: db.url }, ['migrate']).finally(() => (settled = true));
    try {
      await waitFor('migrate waiting longer than statement_timeout', async () => settled || (await waitingForLock(db, 1_500)));
    } finally {
      await lock.release();
    }
    expect(await running).toMatchObject({ code: 0, stderr: 'webhooks: waiting for another webhooks migrate on this database to finish\n' });
    // A migration longer than the database's statement_timeout, on a pool without one (as the CLI's).
    const slow = 'SELECT pg_sleep(1.5);';
    const unlimited = openPostgres(db.url, { maxConnections: 1, statementTimeoutMs: 0 });
    opened.push(unlimited);
    await expect(migrate(unlimited, [...MIGRATIONS, { version: REQUIRED_VERSION + 1, name: 'slow', sql: slow, checksum: checksumOf(slow) }])).resolves.toMatchObject({ version: REQUIRED_VERSION + 1 });
  });

  it('recognises a migration checked out with CRLF line endings as the one that ran from LF files, and the other way round', async () => {
    const shipped = MIGRATIONS.filter((m) => m.version <= 2);
    const crlf = shipped.map((m) => ({ ...m, sql: m.sql.replace(/\n/g, '\r\n'), checksum: checksumOf(m.sql.replace(/\n/g, '\r\n')) }));
    expect(crlf[0]!.sql).toContain('\r\n');
    // The LF files' checksums are the ones the databases migrated before recorded: sha256 of the file.
    for (const m of shipped) expect(m.checksum).toBe(createHash('sha256').update(readFileSync(`${SQL_DIR}/${fileOf(m)}`)).digest('hex'));
    const fromLf = open((await empty('migrate_from_lf')).url);
    await migrate(fromLf, shipped);
    await expect(migrate(fromLf, crlf)).resolves.toMatchObject({ applied: [], version: 2 });
    const fromCrlf = open((await empty('migrate_from_crlf')).url);
    await migrate(fromCrlf, crlf);
    await expect(migrate(fromCrlf, shipped)).resolves.toMatchObject({ applied: [], version: 2 });
  });

  it('reads a migration saved with a UTF-8 BOM (a Windows editor) as the same file: it runs, and its checksum is the one without', async () => {
    const shipped = MIGRATIONS.filter((m) => m.version <= 2);
    // The files as such an editor saves them: a BOM first, and CRLF endings (which already do not count).
    const dir = mkdtempSync(join(tmpdir(), 'migrations-bom-'));
    try {
      for (const m of shipped) writeFileSync(join(dir, fileOf(m)), Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), readFileSync(`${SQL_DIR}/${fileOf(m)}`)]));
      writeFileSync(join(dir, '0003_crlf.sql'), Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from('-- made on Windows\r\nCREATE TABLE bom_crlf (a int);\r\n')]));
      const withBom = readMigrations(dir);
      expect(withBom.map((m) => ({ version: m.version, checksum: m.checksum }))).toEqual([
        ...shipped.map((m) => ({ version: m.version, checksum: m.checksum })),
        { version: 3, checksum: createHash('sha256').update('-- made on Windows\nCREATE TABLE bom_crlf (a int);\n').digest('hex') },
      ]);
      // Applied from the BOM files on an empty database; and recognised where the files without ran.
      const fromBom = open((await empty('migrate_from_bom')).url);
      await expect(migrate(fromBom, withBom)).resolves.toMatchObject({ version: 3 });
      expect(await currentVersion(fromBom)).toBe(3);
      const plain = '-- made on Windows\nCREATE TABLE bom_crlf (a int);\n';
      await expect(migrate(fromBom, [...shipped, { version: 3, name: 'crlf', sql: plain, checksum: checksumOf(plain) }])).resolves.toMatchObject({ applied: [] });
      const fromPlain = open((await empty('migrate_bom_after_plain')).url);
      await migrate(fromPlain, shipped);
      await expect(migrate(fromPlain, withBom.slice(0, 2))).resolves.toMatchObject({ applied: [], version: 2 });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('says which version the database holds and which this release needs, applying nothing (--status)', async () => {
    const db = await empty('migrate_status');
    const before = await runCliInProcess({ DATABASE_URL: db.url }, ['migrate', '--status']);
    const pending = MIGRATIONS.map((m) => `pending: ${fileOf(m)}\n`).join('');
    expect(before).toMatchObject({ code: 3, stdout: `schema version 0, this release needs ${REQUIRED_VERSION}\n${pending}` });
    expect(await currentVersion(open(db.url))).toBe(0);
    await runCliInProcess({ DATABASE_URL: db.url }, ['migrate']);
    expect(await runCliInProcess({ DATABASE_URL: db.url }, ['migrate', '--status'])).toMatchObject({ code: 0, stdout: `schema version ${REQUIRED_VERSION}, this release needs ${REQUIRED_VERSION}\n` });
  });

  it('--status exits 1, as migrate, on a schema newer than this release or a file changed after it ran, naming it', async () => {
    const db = await empty('migrate_status_refused');
    await runCliInProcess({ DATABASE_URL: db.url }, ['migrate']);
    await db.query("INSERT INTO schema_migrations (version, name, checksum) VALUES (9999, 'future', 'x')");
    const newer = await runCliInProcess({ DATABASE_URL: db.url }, ['migrate', '--status']);
    expect(newer.code).toBe(1);
    expect(newer.stderr).toContain(`webhooks: database schema version 9999 is newer than this release knows (${REQUIRED_VERSION})`);
    await db.query('DELETE FROM schema_migrations WHERE version = 9999');
    await db.query("UPDATE schema_migrations SET checksum = 'edited' WHERE version = 1");
    const changed = await runCliInProcess({ DATABASE_URL: db.url }, ['migrate', '--status']);
    expect(changed.code).toBe(1);
    expect(changed.stderr).toContain('webhooks: migration 0001_initial.sql was changed after it ran');
  });

  it("records each migration's declaration of the releases it runs with, and --status and migrate accept a newer schema whose newer migrations all declare this release, naming them", async () => {
    const db = await empty('migrate_beside');
    const database = open(db.url);
    const from = String(REQUIRED_VERSION).padStart(4, '0');
    const beside = [
      migrationOf(`${String(REQUIRED_VERSION + 1).padStart(4, '0')}_later_table.sql`, `-- runs with releases from: ${from}\nCREATE TABLE later_things (a int);\n`),
      migrationOf(`${String(REQUIRED_VERSION + 2).padStart(4, '0')}_later_column.sql`, `-- A nullable column.\n-- runs with releases from: ${from}\nALTER TABLE later_things ADD COLUMN b text;\n`),
    ];
    await migrate(database, [...MIGRATIONS, ...beside]);
    // The files released before 0025 declare nothing (their checksums are recorded); 0025 itself is additive.
    expect(await db.query('SELECT version, runs_with_from FROM schema_migrations WHERE version IN (24, 25) OR version > $1 ORDER BY version', [REQUIRED_VERSION])).toEqual([
      { version: 24, runs_with_from: null },
      { version: 25, runs_with_from: 24 },
      { version: REQUIRED_VERSION + 1, runs_with_from: REQUIRED_VERSION },
      { version: REQUIRED_VERSION + 2, runs_with_from: REQUIRED_VERSION },
    ]);
    const status = await runCliInProcess({ DATABASE_URL: db.url }, ['migrate', '--status']);
    const newer = beside.map((m) => `newer: ${fileOf(m)}, runs with releases from ${REQUIRED_VERSION}\n`).join('');
    expect(status).toMatchObject({ code: 0, stdout: `schema version ${REQUIRED_VERSION + 2}, this release needs ${REQUIRED_VERSION}\n${newer}`, stderr: '' });
    // This release's migrate (a rollback's Job run again) has nothing to apply, and changes nothing;
    // it says, as --status does, that the schema is newer than it knows and which migrations it runs beside.
    expect(await runCliInProcess({ DATABASE_URL: db.url }, ['migrate'])).toMatchObject({ code: 0, stdout: `${newer}schema version ${REQUIRED_VERSION + 2}: nothing to apply\n` });
  });

  it('--status and migrate refuse a newer schema one of whose newer migrations does not declare this release, naming the first', async () => {
    const db = await empty('migrate_not_beside');
    const database = open(db.url);
    const file = (version: number, name: string, sql: string) => migrationOf(`${String(version).padStart(4, '0')}_${name}.sql`, sql);
    const additive = file(REQUIRED_VERSION + 1, 'later_table', `-- runs with releases from: ${String(REQUIRED_VERSION).padStart(4, '0')}\nCREATE TABLE later_things (a int);\n`);
    const narrow = file(REQUIRED_VERSION + 2, 'later_rename', 'ALTER TABLE later_things RENAME COLUMN a TO b;\n');
    const after = file(REQUIRED_VERSION + 3, 'later_after', `-- runs with releases from: ${String(REQUIRED_VERSION).padStart(4, '0')}\nCREATE TABLE later_others (a int);\n`);
    await migrate(database, [...MIGRATIONS, additive, narrow, after]);
    const refusal = `webhooks: database schema version ${REQUIRED_VERSION + 3} is newer than this release knows (${REQUIRED_VERSION}), and ${fileOf(narrow)} runs only with releases that know it: run the release that migrated it, or a newer one\n`;
    expect(await runCliInProcess({ DATABASE_URL: db.url }, ['migrate', '--status'])).toMatchObject({ code: 1, stdout: '', stderr: refusal });
    expect(await runCliInProcess({ DATABASE_URL: db.url }, ['migrate'])).toMatchObject({ code: 1, stdout: '', stderr: refusal });
    // Declared, but for releases after this one only: named with what it declares.
    await db.query('UPDATE schema_migrations SET runs_with_from = $1 WHERE version = $2', [REQUIRED_VERSION + 1, REQUIRED_VERSION + 2]);
    expect((await runCliInProcess({ DATABASE_URL: db.url }, ['migrate', '--status'])).stderr).toContain(
      `newer than this release knows (${REQUIRED_VERSION}), and ${fileOf(narrow)} runs only with releases from ${REQUIRED_VERSION + 1}:`,
    );
  });

  it('refuses a migration file changed after it ran, naming it, and applies nothing after it', async () => {
    const db = await empty('migrate_changed');
    const database = open(db.url);
    const first: Migration = { version: 1, name: 'first', sql: 'CREATE TABLE t1 (a int);', checksum: checksumOf('CREATE TABLE t1 (a int);') };
    await migrate(database, [first]);
    const edited = { ...first, sql: 'CREATE TABLE t1 (a bigint);', checksum: checksumOf('CREATE TABLE t1 (a bigint);') };
    const next: Migration = { version: 2, name: 'second', sql: 'CREATE TABLE t2 (a int);', checksum: checksumOf('CREATE TABLE t2 (a int);') };
    await expect(migrate(database, [edited, next])).rejects.toThrow('migration 0001_first.sql was changed after it ran');
    expect(await currentVersion(database)).toBe(1);
  });

  it('rolls a failing migration back whole, naming it, and keeps the ones before', async () => {
    const db = await empty('migrate_failed');
    const database = open(db.url);
    const good: Migration = { version: 1, name: 'good', sql: 'CREATE TABLE good (a int);', checksum: 'x' };
    const bad: Migration = { version: 2, name: 'bad', sql: 'CREATE TABLE half (a int);\nCREATE TABLE good (a int);', checksum: 'y' };
    await expect(migrate(database, [good, bad])).rejects.toThrow(/^migration 0002_bad\.sql failed and was rolled back: relation "good" already exists/);
    expect(await currentVersion(database)).toBe(1);
    expect(await db.query("SELECT to_regclass('half') AS half")).toEqual([{ half: null }]);
  });

  it("gives up a table lock it cannot take within seconds (a pg_dump, a transaction left open), rolled back, instead of queueing every program's query behind it", async () => {
    const db = await empty('migrate_lock_wait');
    const database = open(db.url);
    const sql = (text: string) => ({ sql: text, checksum: checksumOf(text) });
    const first: Migration = { version: 1, name: 'first', ...sql('CREATE TABLE t (a int);') };
    const second: Migration = { version: 2, name: 'second', ...sql('ALTER TABLE t ADD COLUMN b int;') };
    await migrate(database, [first]);
    // A long reader (pg_dump holds ACCESS SHARE on every table for the whole dump).
    const holder = await database.session();
    await holder.query('BEGIN');
    await holder.query('SELECT count(*) FROM t');
    const running = migrate(open(db.url), [first, second]).then(
      () => 'applied',
      (err: Error) => err.message,
    );
    try {
      await waitFor('the migration waiting for its lock', async () =>
        (await db.query("SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE 'ALTER TABLE t%'")).length > 0,
      );
      // A program's read of the table, with the statement timeout a program has (30 s; here 15 s).
      const program = openPostgres(db.url, { statementTimeoutMs: 15_000 });
      opened.push(program);
      await expect(program.query('SELECT count(*)::int AS n FROM t')).resolves.toMatchObject({ rows: [{ n: 0 }] });
      expect(await running).toMatch(/^migration 0002_second\.sql failed and was rolled back: canceling statement due to lock timeout: another session holds a table it changes/);
    } finally {
      await holder.query('COMMIT').catch(() => {});
      await holder.close();
      await running;
    }
    expect(await currentVersion(database)).toBe(1);
    // Run again once the reader is done: applied.
    await expect(migrate(database, [first, second])).resolves.toMatchObject({ version: 2 });
  });

  it('refuses a database a newer release migrated', async () => {
    const db = await empty('migrate_newer');
    await runCliInProcess({ DATABASE_URL: db.url }, ['migrate']);
    await db.query("INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, 'from_the_future', 'x')", [REQUIRED_VERSION + 1]);
    const result = await runCliInProcess({ DATABASE_URL: db.url }, ['migrate']);
    expect(result.code).toBe(1);
    expect(result.stderr).toContain(`webhooks: database schema version ${REQUIRED_VERSION + 1} is newer than this release knows (${REQUIRED_VERSION})`);
  });

  it("moves a merchant's webhook into its list of endpoints (0011), its secrets still opened from the row sealed before", async () => {
    const db = await empty('migrate_endpoints');
    const database = open(db.url);
    await migrate(database, MIGRATIONS.filter((m) => m.version < 11));
    const box = new SecretBox(Buffer.from(TEST_SECRETS_KEY, 'base64'));
    const secret = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
    await db.query('INSERT INTO merchants (id, public_key, webhook, secrets, version) VALUES ($1, $2, $3, $4, 1), ($5, $6, NULL, NULL, 1)', [
      'm_old',
      'pk_test_old_00001',
      JSON.stringify({ url: 'https://old.example/hooks', enabled: true, events: ['payout'] }),
      box.seal(JSON.stringify({ secret }), 'm_old'),
      'm_none',
      'pk_test_none_0001',
    ]);
    await migrate(database, MIGRATIONS);
    const directory = new PgMerchantDirectory(database, box, silentLogger());
    try {
      await directory.start();
      const [endpoint] = directory.byId('m_old')!.endpoints;
      expect(endpoint).toMatchObject({ url: 'https://old.example/hooks', enabled: true, events: ['payout'], secret });
      expect(endpoint!.id).toMatch(ENDPOINT_ID);
      expect(directory.byId('m_none')!.endpoints).toEqual([]);
    } finally {
      await directory.close();
    }
  });

  it("keeps the failures and the log written before endpoints fanned out (0014): their endpoint '', a new endpoint's failure of the same webhook a row of its own", async () => {
    const db = await empty('migrate_endpoint_deliveries');
    const database = open(db.url);
    await migrate(database, MIGRATIONS.filter((m) => m.version < 14));
    await db.query(`INSERT INTO failed_webhooks (merchant_id, webhook_id, failed_at, event, merchant_refs, content) VALUES ('m_old', 'wh_old', now(), 'payout', '{}', '{}')`);
    await db.query(`INSERT INTO delivery_webhooks (merchant_id, webhook_id, first_seen_at, seq, event, refs, merchant_refs, status, attempts, last_record_at)
      VALUES ('m_old', 'wh_old', now(), 1, 'payout', '{}', '{}', 'failed', 1, now())`);
    await migrate(database, MIGRATIONS);
    expect(await db.query('SELECT endpoint_id FROM failed_webhooks')).toEqual([{ endpoint_id: '' }]);
    expect(await db.query('SELECT endpoint_id FROM delivery_webhooks')).toEqual([{ endpoint_id: '' }]);
    await db.query(`INSERT INTO failed_webhooks (merchant_id, webhook_id, endpoint_id, failed_at, event, merchant_refs, content) VALUES ('m_old', 'wh_old', 'ep_new_0001', now(), 'payout', '{}', '{}')`);
    expect(await db.query("SELECT count(*)::int AS n FROM failed_webhooks WHERE webhook_id = 'wh_old'")).toEqual([{ n: 2 }]);
    // The intake check (0012) looks the log up by (merchant, webhook): the key's leading columns serve it.
    const keyOf = async (table: string) =>
      (await db.query<{ column: string }>(
        `SELECT a.attname AS column FROM pg_index i CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, n)
         JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum WHERE i.indrelid = $1::regclass AND i.indisprimary ORDER BY k.n`,
        [table],
      )).map((r) => r.column);
    expect(await keyOf('delivery_webhooks')).toEqual(['merchant_id', 'webhook_id', 'endpoint_id']);
    expect(await keyOf('failed_webhooks')).toEqual(['merchant_id', 'webhook_id', 'endpoint_id']);
  });

  it('names DATABASE_URL, never its password, when it cannot reach or enter the database (exit 1, no stack)', async () => {
    const db = await empty('migrate_unreachable');
    const password = 'pw-Secret-7731';
    const at = (edit: (url: URL) => void) => {
      const url = new URL(db.url);
      url.username = 'postgres';
      url.password = password;
      edit(url);
      return url.toString();
    };
    const port = await freePort();
    const urls = {
      closed: at((url) => (url.port = String(port))),
      missingDatabase: at((url) => (url.pathname = `/${db.name}_missing`)),
      missingRole: at((url) => (url.username = 'no_such_role_migrate')),
      // pg takes any of its settings from the query string too, the password among them.
      passwordInQuery: at((url) => {
        url.port = String(port);
        url.password = '';
        url.search = `?sslmode=disable&password=${password}`;
      }),
    };
    for (const [what, url] of Object.entries(urls)) {
      const result = await runCliInProcess({ DATABASE_URL: url }, ['migrate']);
      expect([what, result.code, result.stdout]).toEqual([what, 1, '']);
      expect(result.stderr).toMatch(/^webhooks: cannot use the PostgreSQL of DATABASE_URL \(postgres:\/\/\w+(:\*\*\*)?@127\.0\.0\.1:\d+\/\w+\): .+\n$/);
      expect(result.stderr).not.toContain(password);
    }
  });

  it("says that it runs as the database's owner, naming DATABASE_URL, when its role may not create tables (exit 1)", async () => {
    const db = await empty('migrate_no_create');
    const role = `${db.name}_role`;
    await db.query(`CREATE ROLE ${role} LOGIN`);
    try {
      const url = new URL(db.url);
      url.username = role;
      const result = await runCliInProcess({ DATABASE_URL: url.toString() }, ['migrate']);
      expect([result.code, result.stdout]).toEqual([1, '']);
      expect(result.stderr).toBe(
        "webhooks: cannot make schema_migrations: permission denied for schema public (webhooks migrate runs as the owner of DATABASE_URL's database)\n",
      );
    } finally {
      await db.query(`DROP ROLE ${role}`);
    }
  });

  it('says which right its role lacks on a database the owner migrated (the ledger, a table), and that a read-only server is no place to migrate (exit 1)', async () => {
    const db = await empty('migrate_rights');
    const first = { version: 1, name: 'first', ...((sql) => ({ sql, checksum: checksumOf(sql) }))('CREATE TABLE t (a int);') };
    const second = { version: 2, name: 'second', ...((sql) => ({ sql, checksum: checksumOf(sql) }))('ALTER TABLE t ADD COLUMN b int;') };
    await migrate(open(db.url), [first]);
    const [creator, reader] = [`${db.name}_creator`, `${db.name}_reader`];
    // A role that may create tables but owns none of the owner's: the programs' role of a least-privilege setup.
    await db.query(`CREATE ROLE ${creator} LOGIN; GRANT CREATE ON SCHEMA public TO ${creator}`);
    await db.query(`CREATE ROLE ${reader} LOGIN; GRANT ALL ON SCHEMA public TO ${reader}; GRANT ALL ON ALL TABLES IN SCHEMA public TO ${reader}; ALTER ROLE ${reader} SET default_transaction_read_only = on`);
    const as = (role: string) => Object.assign(new URL(db.url), { username: role }).toString();
    const owner = "(webhooks migrate runs as the owner of DATABASE_URL's database)";
    try {
      await expect(migrate(open(as(creator)), [first, second])).rejects.toThrow(`cannot read schema_migrations: permission denied for table schema_migrations ${owner}`);
      await db.query(`GRANT SELECT, INSERT ON schema_migrations TO ${creator}`);
      await expect(migrate(open(as(creator)), [first, second])).rejects.toThrow(`migration 0002_second.sql failed and was rolled back: must be owner of table t ${owner}`);
      await expect(migrate(open(as(reader)), [first, second])).rejects.toThrow(
        'cannot make schema_migrations: cannot execute CREATE TABLE in a read-only transaction (DATABASE_URL names a read-only server or session: a standby, or default_transaction_read_only on its role; webhooks migrate runs on the primary)',
      );
      expect(await currentVersion(open(db.url))).toBe(1);
    } finally {
      for (const role of [creator, reader]) await db.query(`DROP OWNED BY ${role}; DROP ROLE ${role}`);
    }
  });

  it("stops every command that reads PostgreSQL on a schema behind, naming the command to run, and on a newer one it does not run beside, as merchants does", async () => {
    const db = await empty('migrate_cli_commands');
    const env = { DATABASE_URL: db.url, SECRETS_KEY: TEST_SECRETS_KEY };
    const commands = [['failed', 'list'], ['waits', 'list'], ['log', '--merchant', 'm_1'], ['merchants', 'list']];
    const behind = `webhooks: database schema version 0, this program needs ${REQUIRED_VERSION}: run npx webhooks migrate\n`;
    for (const command of commands) expect([command.join(' '), await runCliInProcess(env, command)]).toEqual([command.join(' '), { code: 1, stdout: '', stderr: behind }]);
    await runCliInProcess({ DATABASE_URL: db.url }, ['migrate']);
    const narrow = migrationOf(`${String(REQUIRED_VERSION + 1).padStart(4, '0')}_later_rename.sql`, 'ALTER TABLE failed_webhooks RENAME COLUMN event TO event_name;\n');
    await migrate(open(db.url), [...MIGRATIONS, narrow]);
    const newer = `webhooks: database schema version ${REQUIRED_VERSION + 1} is newer than this release knows (${REQUIRED_VERSION}), and ${fileOf(narrow)} runs only with releases that know it: run the release that migrated it, or a newer one\n`;
    for (const command of commands) expect([command.join(' '), await runCliInProcess(env, command)]).toEqual([command.join(' '), { code: 1, stdout: '', stderr: newer }]);
  });

  it('needs DATABASE_URL', async () => {
    const result = await runCliInProcess({}, ['migrate']);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('migrate needs DATABASE_URL');
  });
});
