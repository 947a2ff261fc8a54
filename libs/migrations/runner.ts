import { type Database, isLockRefused, isPrivilegeRefused, isReadOnly, type Queryable, type Session } from '../delivery-store/index.js';
import { MIGRATIONS, type Migration } from './files.js';
import { fileOf, SchemaTooNewError } from './errors.js';

/** Held for a whole run: a second `webhooks migrate` (another machine) waits, then finds nothing to do. */
const LOCK = 'webhooks-schema-migrations';

/** How long a migration's statement waits for a table's lock, while the programs' queries on it queue behind. */
export const MIGRATION_LOCK_WAIT = '5s';

/** The one table made outside a numbered file, since it records them. */
const LEDGER = `CREATE TABLE IF NOT EXISTS schema_migrations (
  version integer PRIMARY KEY,
  name text NOT NULL,
  checksum text NOT NULL,
  applied_at timestamptz NOT NULL DEFAULT now()
)`;

/** The highest migration applied; 0 for a database no migration ran on. */
export async function currentVersion(db: Queryable): Promise<number> {
  const { rows } = await db.query<{ present: boolean }>("SELECT to_regclass('schema_migrations') IS NOT NULL AS present");
  if (!rows[0]?.present) return 0;
  const max = await db.query<{ version: number | null }>('SELECT max(version) AS version FROM schema_migrations');
  return Number(max.rows[0]?.version ?? 0);
}

/** A migration as schema_migrations records it (runsWithFrom: NULL when undeclared). */
export type AppliedMigration = Pick<Migration, 'version' | 'name' | 'checksum'> & { runsWithFrom: number | null };

/** runs_with_from through to_jsonb: a ledger written before 0025 has no such column, which reads as NULL. */
const APPLIED = `SELECT version, name, checksum, (to_jsonb(m) ->> 'runs_with_from')::integer AS "runsWithFrom"
  FROM schema_migrations m WHERE version > $1 ORDER BY version`;

export async function appliedAfter(db: Queryable, version: number): Promise<AppliedMigration[]> {
  return (await db.query<AppliedMigration>(APPLIED, [version])).rows;
}

/** The migrations past `known` (`rows` in version order): each must declare `known` or older, else SchemaTooNewError. */
export function besideNewer(rows: readonly AppliedMigration[], known: number): AppliedMigration[] {
  const newer = rows.filter((row) => row.version > known);
  const refusing = newer.find((row) => row.runsWithFrom === null || row.runsWithFrom > known);
  if (refusing) throw new SchemaTooNewError(newer.at(-1)!.version, known, refusing);
  return newer;
}

/** Refuses an unknown version that does not declare this release, or a file changed after it ran; returns besideNewer. */
function checkApplied(rows: readonly AppliedMigration[], migrations: readonly Migration[]): AppliedMigration[] {
  const highest = migrations.at(-1)?.version ?? 0;
  const known = new Map(migrations.map((m) => [m.version, m]));
  for (const row of rows) {
    const migration = known.get(row.version);
    // An unknown version below this release's highest is never run beside.
    if (!migration && row.version < highest) throw new SchemaTooNewError(rows.at(-1)!.version, highest, { ...row, runsWithFrom: null });
    if (migration && migration.checksum !== row.checksum) throw new Error(`migration ${fileOf(migration)} was changed after it ran (its checksum differs): restore the released file; a change to the schema is a new migration`);
  }
  return besideNewer(rows, highest);
}

/** For `migrate --status`: the version held and the newer migrations run beside, after `migrate`'s checks; reads only. */
export async function appliedSchema(db: Queryable): Promise<{ version: number; newer: AppliedMigration[] }> {
  const current = await currentVersion(db);
  if (current === 0) return { version: 0, newer: [] };
  return { version: current, newer: checkApplied(await appliedAfter(db, 0), MIGRATIONS) };
}

/** What PostgreSQL's "permission denied" or "read-only transaction" does not say: what `migrate` needs. */
function whatItNeeds(err: unknown): string {
  if (isReadOnly(err)) return '(DATABASE_URL names a read-only server or session: a standby, or default_transaction_read_only on its role; webhooks migrate runs on the primary)';
  return "(webhooks migrate runs as the owner of DATABASE_URL's database)";
}

/** Takes LOCK for the session, waiting however long another run takes (lock_timeout 0: a role's would cut it). */
async function takeLock(session: Session, onWait?: () => void): Promise<void> {
  await session.transaction(async (tx) => {
    await tx.query('SET LOCAL lock_timeout = 0');
    const { rows } = await tx.query<{ taken: boolean }>('SELECT pg_try_advisory_lock(hashtext($1)) AS taken', [LOCK]);
    if (rows[0]?.taken) return;
    onWait?.();
    await tx.query('SELECT pg_advisory_lock(hashtext($1))', [LOCK]);
  });
}

/** Applies the migrations not applied yet, each in its own transaction, under LOCK, after checkApplied. */
export async function migrate(
  db: Pick<Database, 'session'>,
  migrations: readonly Migration[] = MIGRATIONS,
  options: { onWait?: () => void } = {},
): Promise<{ applied: Migration[]; version: number; newer: AppliedMigration[] }> {
  const session = await db.session();
  try {
    await takeLock(session, options.onWait);
    try {
      await session.query(LEDGER).catch((err: unknown) => {
        throw new Error(`cannot make schema_migrations: ${(err as Error)?.message ?? String(err)} ${whatItNeeds(err)}`, { cause: err });
      });
      const rows = await appliedAfter(session, 0).catch((err: unknown) => {
        throw new Error(`cannot read schema_migrations: ${(err as Error)?.message ?? String(err)} ${whatItNeeds(err)}`, { cause: err });
      });
      const newer = checkApplied(rows, migrations);
      const highest = migrations.at(-1)?.version ?? 0;
      const done = new Set(rows.map((row) => row.version));
      const applied = migrations.filter((migration) => !done.has(migration.version));
      for (const migration of applied) {
        await session.query('BEGIN');
        try {
          await session.query(`SET LOCAL lock_timeout = '${MIGRATION_LOCK_WAIT}'`);
          await session.exec(migration.sql);
          // runs_with_from named only when declared: before 0025 there is no such column.
          if (migration.runsWithFrom === undefined) await session.query('INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, $2, $3)', [migration.version, migration.name, migration.checksum]);
          else await session.query('INSERT INTO schema_migrations (version, name, checksum, runs_with_from) VALUES ($1, $2, $3, $4)', [migration.version, migration.name, migration.checksum, migration.runsWithFrom]);
          await session.query('COMMIT');
        } catch (err) {
          await session.query('ROLLBACK').catch(() => {});
          const waited = isLockRefused(err) ? ': another session holds a table it changes (a long transaction, a pg_dump); run migrate again once it ends' : '';
          const refused = isReadOnly(err) || isPrivilegeRefused(err) ? ` ${whatItNeeds(err)}` : '';
          throw new Error(`migration ${fileOf(migration)} failed and was rolled back: ${(err as Error)?.message ?? String(err)}${waited}${refused}`, { cause: err });
        }
      }
      return { applied, version: Math.max(highest, ...rows.map((row) => row.version)), newer };
    } finally {
      await session.query('SELECT pg_advisory_unlock(hashtext($1))', [LOCK]).catch(() => {});
    }
  } finally {
    await session.close();
  }
}
