import type { Migration } from './files.js';

/** The command an operator runs; quoted in every message that asks for it. */
export const MIGRATE_COMMAND = 'npx webhooks migrate';

/** The database's schema is older than this release needs: `webhooks migrate` has not run yet. */
export class SchemaBehindError extends Error {
  constructor(
    readonly current: number,
    readonly needed: number,
  ) {
    // The command spelled out (MIGRATE_COMMAND), so that the guides can quote the message whole.
    super(`database schema version ${current}, this program needs ${needed}: run npx webhooks migrate`);
    this.name = 'SchemaBehindError';
  }
}

/** The database was migrated by a newer release: an older program must not run against it. */
export class SchemaTooNewError extends Error {
  constructor(
    readonly current: number,
    readonly known: number,
  ) {
    super(`database schema version ${current} is newer than this release knows (${known}): run the release that migrated it, or a newer one`);
    this.name = 'SchemaTooNewError';
  }
}

/** A migration file edited after it ran: what ran is no longer what the file says. */
export class MigrationChangedError extends Error {
  constructor(migration: Migration) {
    super(`migration ${fileOf(migration)} was changed after it ran (its checksum differs): restore the released file; a change to the schema is a new migration`);
    this.name = 'MigrationChangedError';
  }
}

/** A migration PostgreSQL refused: rolled back, nothing of it applied. */
export class MigrationFailedError extends Error {
  constructor(migration: Migration, cause: unknown) {
    const waited = (cause as { code?: string })?.code === '55P03' ? ': another session holds a table it changes (a long transaction, a pg_dump); run migrate again once it ends' : '';
    super(`migration ${fileOf(migration)} failed and was rolled back: ${(cause as Error)?.message ?? String(cause)}${waited}`, { cause });
    this.name = 'MigrationFailedError';
  }
}

/** The ledger could not be made (a role without CREATE): PostgreSQL's words alone do not say what `migrate` needs. */
export class LedgerRefusedError extends Error {
  constructor(cause: unknown) {
    super(`cannot make schema_migrations: ${(cause as Error)?.message ?? String(cause)} (webhooks migrate runs as the owner of DATABASE_URL's database)`, { cause });
    this.name = 'LedgerRefusedError';
  }
}

/** PostgreSQL answered but refused the look (no such database or role, a wrong password): not waited for. */
export class SchemaUnreadableError extends Error {
  constructor(cause: unknown) {
    super(`cannot read the database schema version: ${(cause as Error)?.message ?? String(cause)} (DATABASE_URL)`, { cause });
    this.name = 'SchemaUnreadableError';
  }
}

/** PostgreSQL stayed unreachable for the whole start-up wait. */
export class SchemaUnknownError extends Error {
  constructor(cause: unknown) {
    super(`database unreachable at start-up, schema version unknown: ${(cause as Error)?.message ?? String(cause)} (DATABASE_URL)`, { cause });
    this.name = 'SchemaUnknownError';
  }
}

export function fileOf(migration: Pick<Migration, 'version' | 'name'>): string {
  return `${String(migration.version).padStart(4, '0')}_${migration.name}.sql`;
}
