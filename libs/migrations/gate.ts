import { setTimeout as sleep } from 'node:timers/promises';
import { openPostgres, type Queryable } from '../delivery-store/index.js';
import type { Logger } from '../logger/index.js';
import { REQUIRED_VERSION } from './files.js';
import { MIGRATE_COMMAND, SchemaBehindError, SchemaTooNewError, SchemaUnknownError } from './errors.js';
import { currentVersion } from './runner.js';

/** How long a program waits at start-up for the schema it needs (or for PostgreSQL to answer). */
export const SCHEMA_WAIT_MS = 120_000;
/** How often it looks again meanwhile. */
export const SCHEMA_CHECK_INTERVAL_MS = 2_000;

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
  waitMs?: number;
  intervalMs?: number;
  /** The version needed; this release's REQUIRED_VERSION by default. */
  required?: number;
}

/**
 * Waits until the database holds the schema version this release needs: a schema behind (the
 * release's `webhooks migrate` has not run yet) or a database not answering is waited for, said
 * once in the log, and looked at again every 2 s up to SCHEMA_WAIT_MS; then it throws with what to
 * do. A schema newer than this release knows throws at once: an older program must not write to
 * tables a newer release reshaped. A program never changes the schema itself.
 */
export async function awaitSchema(db: Queryable, logger: Logger, options: SchemaGateOptions = {}): Promise<void> {
  const required = options.required ?? REQUIRED_VERSION;
  const giveUpAt = Date.now() + (options.waitMs ?? SCHEMA_WAIT_MS);
  let told: SchemaWaitState['waiting'];
  for (;;) {
    let problem: Error;
    let waiting: SchemaWaitState['waiting'];
    try {
      await checkSchema(db, required);
      break;
    } catch (err) {
      if (err instanceof SchemaBehindError) {
        problem = err;
        waiting = 'schema';
        if (told !== waiting) logger.warn('database schema is older than this program needs; waiting for it to be migrated', { current: err.current, needed: required, run: MIGRATE_COMMAND });
      } else {
        if (err instanceof SchemaTooNewError || !retryable(err)) throw err;
        problem = new SchemaUnknownError(err);
        waiting = 'database';
        if (told !== waiting) logger.warn('database unreachable at start-up; waiting for it', { error: (err as Error).message });
      }
    }
    told = waiting;
    options.onState?.({ waiting, detail: problem.message });
    if (Date.now() >= giveUpAt) throw problem;
    // Rejects at once on the signal (Ctrl-C during start-up); not unref'd: it keeps the program alive.
    await sleep(Math.min(options.intervalMs ?? SCHEMA_CHECK_INTERVAL_MS, Math.max(0, giveUpAt - Date.now())), undefined, { signal: options.signal });
  }
  options.onState?.({});
  if (told) logger.info('database schema is the version this program needs', { version: required });
}

/** One look: throws SchemaBehindError or SchemaTooNewError unless the database holds `required`. */
export async function checkSchema(db: Queryable, required = REQUIRED_VERSION): Promise<void> {
  const current = await currentVersion(db);
  if (current > required) throw new SchemaTooNewError(current, required);
  if (current < required) throw new SchemaBehindError(current, required);
}

/** An outage worth waiting through; a wrong password or a missing database is not. */
function retryable(err: unknown): boolean {
  const code = (err as { code?: string })?.code;
  if (code === undefined) return err instanceof Error;
  return /^(08|53|57P|58)/.test(code) || ['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'ENOTFOUND', 'EAI_AGAIN'].includes(code);
}

/**
 * awaitSchema for a program that can run without PostgreSQL (merchants in MERCHANTS_FILE), looked
 * at beside its start-up: a database that does not answer is waited for however long it takes.
 * Settles once the schema is the one needed; rejects (the program stops) when it is newer than this
 * release knows, or still behind after SCHEMA_WAIT_MS, or on the signal.
 */
export async function watchSchema(db: Queryable, logger: Logger, options: SchemaGateOptions = {}): Promise<void> {
  for (;;) {
    try {
      return await awaitSchema(db, logger, options);
    } catch (err) {
      if (!(err instanceof SchemaUnknownError)) throw err;
    }
  }
}

/** awaitSchema (or watchSchema) on a connection of its own to `url`, closed once it settles. */
export async function awaitSchemaAt(url: string, applicationName: string, logger: Logger, options: SchemaGateOptions & { watch?: boolean } = {}): Promise<void> {
  const database = openPostgres(url, { maxConnections: 1, applicationName });
  try {
    await (options.watch ? watchSchema : awaitSchema)(database, logger, options);
  } finally {
    await database.close();
  }
}
