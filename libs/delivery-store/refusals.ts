/**
 * Which PostgreSQL errors are about a batch's data (split it, set aside what is refused) and which
 * about the database (give the lead up, try again): an outage must never cost a record, and a
 * value it cannot hold must never stop the log.
 */
import { UnstorableTimeError } from './schema.js';

const codeOf = (err: unknown): string => String((err as { code?: unknown })?.code ?? '');

/** The error's SQLSTATE, or undefined for a socket's (ECONNREFUSED, EPIPE: five capitals too) or the driver's. */
function sqlStateOf(err: unknown): string | undefined {
  const code = codeOf(err);
  return /^([0-9][0-9A-Z]|F0|HV|P0|XX)[0-9A-Z]{3}$/.test(code) ? code : undefined;
}

/** SQLSTATE classes of the database's state, not the statement's data: retried, never set aside. */
const TRANSIENT_CLASSES = new Set([
  '08', // connection exception
  '40', // transaction rollback (serialisation, deadlock)
  '53', // insufficient resources (disk full, out of memory, too many connections)
  '55', // object not in prerequisite state (lock not available)
  '57', // operator intervention (shutdown, cancel); 57014, a statement timeout, is isTimeout's
  '58', // system error (I/O)
  'XX', // internal error
  'F0', // configuration file error
  'HV', // foreign data wrapper
]);

/**
 * An error of the database's state or of the way to it, not of what the statement carried: worth
 * trying again. A wrong password (28P01) or a missing database (3D000) is not.
 */
export function isTransient(err: unknown): boolean {
  const state = sqlStateOf(err);
  // 25006, a write on a read-only server: a failover's standby, or the old primary still named, until the switch ends.
  if (state !== undefined) return TRANSIENT_CLASSES.has(state.slice(0, 2)) || state === '25006';
  // A socket's errno, or pg's lost connection (no code); Node's ERR_… codes are a program's mistakes.
  // Not `instanceof Error`: a socket's error is made in Node's own realm, which a test sandbox does not share.
  const code = codeOf(err);
  if (code === '') return typeof (err as { message?: unknown })?.message === 'string';
  return /^E[A-Z0-9_]+$/.test(code) && !code.startsWith('ERR_');
}

/**
 * The statement was refused for a row it wrote (a data exception, a constraint, a limit, a trigger's
 * RAISE or ASSERT): the same row will be refused again, so a batch that holds it is written apart
 * and that row alone refused. Not class 42 (a refused grant, a missing function): it refuses every
 * row alike, and is retried as an outage is.
 */
export function isDataRefusal(err: unknown): boolean {
  return ['22', '23', '54', 'P0'].includes(sqlStateOf(err)?.slice(0, 2) ?? '');
}

const hasCode = (code: string) => (err: unknown): boolean => codeOf(err) === code;

/** A lock not taken within lock_timeout (55P03): the partitions' upkeep and a migration give way instead of holding a table's queries behind them. */
export const isLockRefused = hasCode('55P03');

/** A right the role lacks (42501: "permission denied for …", "must be owner of …"): `migrate` names the role it runs as. */
export const isPrivilegeRefused = hasCode('42501');

/** A write on a read-only server or session (25006: a standby, default_transaction_read_only): `migrate` says it runs on the primary. */
export const isReadOnly = hasCode('25006');

export const isTimeout = hasCode('57014');

/** A transaction rolled back for another's sake (40P01 a deadlock, 40001 a serialisation failure): at once again, it goes through. */
export const isRolledBack = (err: unknown): boolean => sqlStateOf(err)?.slice(0, 2) === '40';

/** A row of a day with no partition (23514, "no partition of relation found for row"; the partitioned tables have no CHECK). */
export const isPartitionMissing = hasCode('23514');

/**
 * The recorder's statement was refused for what it carried: a row's refusal (isDataRefusal), or a
 * day no partition can hold. A statement timeout counts for several records (the batch may be too
 * large), never for one alone (see BatchWriter's timedOutEnough).
 */
export function isRefusal(err: unknown, records: number): boolean {
  if (err instanceof UnstorableTimeError) return true;
  if (isTimeout(err)) return records > 1;
  // 21000: ON CONFLICT DO UPDATE met one row twice (two failures of one delivery in a batch): halves store them apart.
  return isDataRefusal(err) || sqlStateOf(err)?.slice(0, 2) === '21';
}
