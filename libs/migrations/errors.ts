import type { Migration } from './files.js';
import { NamedError } from '../runtime/named-error.js';

export const MIGRATE_COMMAND = 'npx webhooks migrate';

/** The database's schema is older than this release needs: `webhooks migrate` has not run yet. */
export class SchemaBehindError extends NamedError {
  constructor(
    readonly current: number,
    readonly needed: number,
  ) {
    // Spelled out, not MIGRATE_COMMAND: troubleshooting.md quotes the message whole, as the source has it.
    super(`database schema version ${current}, this program needs ${needed}: run npx webhooks migrate`);
  }
}

/** A newer release's migration (`refusing`) does not declare this release: it must not write to tables it reshaped. */
export class SchemaTooNewError extends NamedError {
  constructor(
    readonly current: number,
    readonly known: number,
    readonly refusing: Pick<Migration, 'version' | 'name'> & { runsWithFrom: number | null },
  ) {
    const releases = refusing.runsWithFrom === null ? 'that know it' : `from ${refusing.runsWithFrom}`;
    super(`database schema version ${current} is newer than this release knows (${known}), and ${fileOf(refusing)} runs only with releases ${releases}: run the release that migrated it, or a newer one`);
  }
}

/** PostgreSQL stayed unreachable for the whole start-up wait. */
export class SchemaUnknownError extends NamedError {
  constructor(cause: unknown) {
    super(`database unreachable at start-up, schema version unknown: ${(cause as Error)?.message ?? String(cause)} (DATABASE_URL)`, { cause });
  }
}

export function fileOf(migration: Pick<Migration, 'version' | 'name'>): string {
  return `${String(migration.version).padStart(4, '0')}_${migration.name}.sql`;
}
