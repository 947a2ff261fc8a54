/** What PostgreSQL can hold, checked first: a value it refuses would read as an outage (503). */

const EARLIEST = Date.parse('0001-01-01T00:00:00Z');
const LATEST = Date.parse('9999-12-31T23:59:59.999Z');

/** A time as the API takes it (ISO 8601 with an offset) whose instant lies in years 1 to 9999. */
export function isStorableTime(text: string): boolean {
  if (!/^\d{4}-\d{2}-\d{2}T/.test(text)) return false;
  const at = Date.parse(text);
  return !Number.isNaN(at) && at >= EARLIEST && at <= LATEST;
}

/** A feed cursor as digits that fit a bigint. */
export function isStorableFeedCursor(text: string): boolean {
  return /^\d{1,19}$/.test(text) && BigInt(text) <= 9_223_372_036_854_775_807n;
}

/** Text PostgreSQL can store: it refuses NUL in text (SQLSTATE 22021). */
export function isStorableText(text: string): boolean {
  return !text.includes('\u0000');
}
