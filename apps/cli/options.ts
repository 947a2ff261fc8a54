import { parseDuration } from '../../libs/config/index.js';
import { isWellFormedReference } from '../../libs/contracts/index.js';
import { UsageError } from './errors.js';

const ISO_TIME = /^(\d{4})-(\d{2})-(\d{2})(?:[T ](\d{2}):(\d{2})(?::(\d{2})(?:\.\d{1,9})?)?(Z|[+-]\d{2}:?\d{2})?)?$/i;

/**
 * An ISO-8601 time, or a duration meaning "that long ago" (30m, 2h, 7d). A time without an offset
 * is UTC, as every time the service writes is. A date or time that does not exist (2026-02-30,
 * 24:10) is refused: Date.parse would roll it over into the next month or day.
 */
export function parseTime(option: string, text: string, now: Date): Date {
  const trimmed = text.trim();
  const ago = parseDuration(trimmed);
  if (ago !== undefined) return new Date(now.getTime() - ago);
  const match = ISO_TIME.exec(trimmed);
  if (match) {
    const [, year, month, day, hour = '0', minute = '0', second = '0'] = match.map((part) => part ?? undefined);
    const calendar = new Date(Date.UTC(Number(year), Number(month) - 1, Number(day)));
    if (calendar.getUTCMonth() !== Number(month) - 1 || calendar.getUTCDate() !== Number(day) || Number(month) < 1) {
      throw new UsageError(`--${option}: ${year}-${month}-${day} is not a date (month 01 to 12, and no day past the month's last)`);
    }
    if (Number(hour) > 23 || Number(minute) > 59 || Number(second) > 59) {
      throw new UsageError(`--${option}: ${hour}:${minute}:${second} is not a time of day (hours 00 to 23, minutes and seconds 00 to 59)`);
    }
    let iso = trimmed.replace(' ', 'T');
    if (iso.includes('T') && match[7] === undefined) iso += 'Z';
    const ms = Date.parse(iso);
    if (Number.isFinite(ms)) return new Date(ms);
  }
  throw new UsageError(`--${option} takes an ISO-8601 time (e.g. 2026-05-01T10:00:00Z) or a duration ago (e.g. 30m, 2h, 7d), not "${text}"`);
}

export function parseLimit(text: string): number {
  const n = Number(text);
  if (!/^\d+$/.test(text.trim()) || n < 1 || n > 1_000_000) throw new UsageError('--limit takes a whole number from 1 to 1000000');
  return n;
}

export function parseRate(text: string): number {
  const n = Number(text);
  if (!/^\d+(?:\.\d+)?$/.test(text.trim()) || !(n > 0) || n > 10_000) throw new UsageError('--rate takes a number of webhooks per second above 0, at most 10000');
  return n;
}

/** The rule of the resend API: a reference it can look up, given exactly as it was published. */
export function checkReference(text: string): string {
  if (!isWellFormedReference(text)) throw new UsageError('a reference is 1 to 200 characters without control characters');
  return text;
}

/** An endpoint id as the API takes it: the log's and the index's filters, the resend's choice. */
export function checkEndpointId(text: string): string {
  if (text.length === 0 || text.length > 200 || text.includes('\u0000')) throw new UsageError('--endpoint takes an endpoint id (ep_…) of 1 to 200 characters');
  return text;
}

export function requireMerchant(value: string | undefined, command: string): string {
  if (value === undefined || value.trim() === '') throw new UsageError(`${command} needs --merchant <id>`);
  if (value.length > 200) throw new UsageError('--merchant takes an id of at most 200 characters');
  return value;
}

