import { setTimeout as sleep } from 'node:timers/promises';
import { isTransient, openPostgres, type Queryable } from '../delivery-store/index.js';
import type { Logger } from '../logger/index.js';
import { REQUIRED_VERSION } from './files.js';
import { fileOf, MIGRATE_COMMAND, SchemaBehindError, SchemaTooNewError, SchemaUnknownError } from './errors.js';
import { type AppliedMigration, appliedAfter, besideNewer, currentVersion } from './runner.js';

/** How long a program waits at start-up for the schema it needs (or for PostgreSQL to answer). */
export const SCHEMA_WAIT_MS = 120_000;
const SCHEMA_CHECK_INTERVAL_MS = 2_000;

/** What a program starting up waits for, for its /readyz; none once the schema is the one it needs. */
export interface SchemaWaitState {
  waiting?: 'database' | 'schema';
  /** Why, in words an operator acts on (the command to run when the schema is behind). */
  detail?: string;
}

export interface SchemaGateOptions {
  signal?: AbortSignal;
  /** Called whenever what it waits for changes. */
  onState?: (state: SchemaWaitState) => void;
}

/**
 * Waits up to SCHEMA_WAIT_MS for the database to hold REQUIRED_VERSION (or for PostgreSQL to answer), then
 * throws with what to do. A newer schema throws at once, unless checkSchema finds this release runs beside it.
 */
export async function awaitSchema(db: Queryable, logger: Logger, options: SchemaGateOptions = {}): Promise<void> {
  const giveUpAt = Date.now() + SCHEMA_WAIT_MS;
  let told: SchemaWaitState['waiting'];
  let beside: AppliedMigration[];
  for (;;) {
    try {
      beside = await checkSchema(db);
      break;
    } catch (err) {
      if (err instanceof SchemaTooNewError) throw err;
      const behind = err instanceof SchemaBehindError;
      // PostgreSQL answered but refused the look (no such database or role, a wrong password): not waited for.
      if (!behind && !isTransient(err)) throw new Error(`cannot read the database schema version: ${(err as Error)?.message ?? String(err)} (DATABASE_URL)`, { cause: err });
      const problem = behind ? err : new SchemaUnknownError(err);
      const waiting = behind ? 'schema' : 'database';
      if (told !== waiting && behind) logger.warn('database schema is older than this program needs; waiting for it to be migrated', { current: err.current, needed: REQUIRED_VERSION, run: MIGRATE_COMMAND });
      if (told !== waiting && !behind) logger.warn('database unreachable at start-up; waiting for it', { error: (err as Error).message });
      told = waiting;
      options.onState?.({ waiting, detail: problem.message });
      if (Date.now() >= giveUpAt) throw problem;
    }
    // Rejects at once on the signal (Ctrl-C during start-up); not unref'd: it keeps the program alive.
    await sleep(Math.min(SCHEMA_CHECK_INTERVAL_MS, Math.max(0, giveUpAt - Date.now())), undefined, { signal: options.signal });
  }
  options.onState?.({});
  if (beside.length > 0) {
    logger.info('database schema is newer than this program knows; running beside the newer migrations, which declare that it runs with them', {
      current: beside.at(-1)!.version,
      known: REQUIRED_VERSION,
      beside: beside.map(fileOf),
    });
  } else if (told) logger.info('database schema is the version this program needs', { version: REQUIRED_VERSION });
}

/** One look: throws SchemaBehindError or SchemaTooNewError (besideNewer); returns the newer migrations it runs beside. */
export async function checkSchema(db: Queryable): Promise<AppliedMigration[]> {
  const current = await currentVersion(db);
  if (current < REQUIRED_VERSION) throw new SchemaBehindError(current, REQUIRED_VERSION);
  return current > REQUIRED_VERSION ? besideNewer(await appliedAfter(db, REQUIRED_VERSION), REQUIRED_VERSION) : [];
}

export async function awaitSchemaAt(url: string, applicationName: string, logger: Logger, options: SchemaGateOptions = {}): Promise<void> {
  const database = openPostgres(url, { maxConnections: 1, applicationName });
  try {
    return await awaitSchema(database, logger, options);
  } finally {
    await database.close();
  }
}
