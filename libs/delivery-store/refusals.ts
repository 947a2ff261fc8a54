/**
 * Which PostgreSQL errors are about a batch's data (split it, set aside what is refused) and which
 * about the database (give the lead up, try again): an outage must never cost a record, and a
 * value it cannot hold must never stop the log.
 */
import { UnstorableTimeError } from './schema.js';

const codeOf = (err: unknown): string => String((err as { code?: unknown })?.code ?? '');

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

export function isTimeout(err: unknown): boolean {
  return codeOf(err) === '57014';
}

/**
 * The statement was refused for what it carried: any SQLSTATE outside the transient classes, or a
 * day no partition can hold. A statement timeout counts for several records (the batch may be too
 * large), never for one alone (see BatchWriter's timedOutEnough).
 */
export function isRefusal(err: unknown, records: number): boolean {
  if (err instanceof UnstorableTimeError) return true;
  if (isTimeout(err)) return records > 1;
  const code = codeOf(err);
  if (!/^[0-9A-Z]{5}$/.test(code)) return false; // no SQLSTATE: the connection, not the data
  return !TRANSIENT_CLASSES.has(code.slice(0, 2));
}
