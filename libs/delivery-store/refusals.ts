/**
 * Which PostgreSQL errors are about a batch's data (split it, set aside what is refused) and which
 * about the database (give the lead up, try again): an outage must never cost a record, and a
 * value it cannot hold must never stop the log.
 */
import { UnstorableTimeError } from './schema.js';

const codeOf = (err: unknown): string => String((err as { code?: unknown })?.code ?? '');

/**
 * The error's SQLSTATE, or undefined for one PostgreSQL did not send: a socket's (ECONNREFUSED,
 * EPIPE: five capitals too, so the shape alone is not enough) or the driver's. Classes are two
 * digits, or F0, HV, P0, XX.
 */
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
 * trying again. A wrong password (28P01) or a missing database (3D000) is not: waiting would
 * not help. The one list for the recorder, the merchant store and the programs' schema gate.
 */
export function isTransient(err: unknown): boolean {
  const state = sqlStateOf(err);
  if (state !== undefined) return TRANSIENT_CLASSES.has(state.slice(0, 2));
  // A socket's errno (ECONNREFUSED, EPIPE, ENOTFOUND…), or pg's lost connection (no code); Node's
  // own ERR_… codes are a program's mistakes. Not `instanceof Error`: a socket's error is made by
  // Node's own realm, which a test runner's sandbox does not share.
  const code = codeOf(err);
  if (code === '') return typeof (err as { message?: unknown })?.message === 'string';
  return /^E[A-Z0-9_]+$/.test(code) && !code.startsWith('ERR_');
}

/**
 * The statement was refused for a row it wrote: a value it carried (a data exception, a constraint,
 * a value past a limit such as an index row's size), or a rule of the database that refuses that
 * row (a trigger's RAISE, whose default SQLSTATE is P0001, or its ASSERT): the same row will be
 * refused again, so a batch that holds it is written apart (writeApart) and that row alone refused.
 * Narrower than isRefusal: a refused grant or a missing function (class 42) would refuse every
 * row alike, and is held and retried as an outage is, until an operator mends it. The rule of the
 * waits and the order steps; the recorder's (isRefusal) adds class 21.
 */
export function isDataRefusal(err: unknown): boolean {
  return ['22', '23', '54', 'P0'].includes(sqlStateOf(err)?.slice(0, 2) ?? '');
}

/** A lock not taken within lock_timeout (55P03): the partitions' upkeep and a migration give way instead of holding a table's queries behind them. */
export function isLockRefused(err: unknown): boolean {
  return codeOf(err) === '55P03';
}

/** A right the role lacks (42501: "permission denied for …", "must be owner of …"): `migrate` names the role it runs as. */
export function isPrivilegeRefused(err: unknown): boolean {
  return codeOf(err) === '42501';
}

/** A write on a read-only server or session (25006: a standby, default_transaction_read_only): `migrate` says it runs on the primary. */
export function isReadOnly(err: unknown): boolean {
  return codeOf(err) === '25006';
}

export function isTimeout(err: unknown): boolean {
  return codeOf(err) === '57014';
}

/**
 * The recorder's statement was refused for what it carried: a row's refusal (isDataRefusal), or a
 * day no partition can hold. A statement timeout counts for several records (the batch may be too
 * large), never for one alone (see BatchWriter's timedOutEnough). Not any SQLSTATE outside the
 * transient classes: a revoked grant or a missing table (class 42) set every record aside while it
 * lasted; it gives the lead up, tried again from the stored offset, as an outage does.
 */
export function isRefusal(err: unknown, records: number): boolean {
  if (err instanceof UnstorableTimeError) return true;
  if (isTimeout(err)) return records > 1;
  // 21000: a statement's ON CONFLICT DO UPDATE met one row twice (two failures of one webhook's
  // endpoint in a batch, a resend's beside the first's): its halves store them apart. Held and
  // retried as an outage, the recorder tried that batch again for ever (endpoint-log.test).
  return isDataRefusal(err) || sqlStateOf(err)?.slice(0, 2) === '21';
}
