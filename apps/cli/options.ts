import { parseDuration } from '../../libs/config/index.js';
import { isWellFormedReference } from '../../libs/contracts/index.js';
import { UsageError } from './errors.js';

/** Runs node:util parseArgs, turning its errors (unknown option, missing value) into a usage error of this command. */
export function parseWithUsage<R>(usage: string, parse: () => R): R {
  try {
    return parse();
  } catch (err) {
    if (String((err as { code?: unknown })?.code ?? '').startsWith('ERR_PARSE_ARGS')) throw new UsageError((err as Error).message, usage);
    throw err;
  }
}

const ISO_TIME = /^\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?(?:Z|[+-]\d{2}:?\d{2})?)?$/i;
const HAS_OFFSET = /(?:Z|[+-]\d{2}:?\d{2})$/i;

/**
 * An ISO-8601 time, or a duration meaning "that long ago" (30m, 2h, 7d). A time without an offset
 * is UTC, as every time the service writes is.
 */
export function parseTime(option: string, text: string, now: Date, usage: string): Date {
  const trimmed = text.trim();
  const ago = parseDuration(trimmed);
  if (ago !== undefined) return new Date(now.getTime() - ago);
  if (ISO_TIME.test(trimmed)) {
    let iso = trimmed.replace(' ', 'T');
    if (iso.includes('T') && !HAS_OFFSET.test(iso)) iso += 'Z';
    const ms = Date.parse(iso);
    if (Number.isFinite(ms)) return new Date(ms);
  }
  throw new UsageError(`--${option} takes an ISO-8601 time (e.g. 2026-05-01T10:00:00Z) or a duration ago (e.g. 30m, 2h, 7d), not "${text}"`, usage);
}

export function parseLimit(text: string, usage: string): number {
  const n = Number(text);
  if (!/^\d+$/.test(text.trim()) || n < 1 || n > 1_000_000) throw new UsageError('--limit takes a whole number from 1 to 1000000', usage);
  return n;
}

export function parseRate(text: string, usage: string): number {
  const n = Number(text);
  if (!/^\d+(?:\.\d+)?$/.test(text.trim()) || !(n > 0) || n > 10_000) throw new UsageError('--rate takes a number of webhooks per second above 0, at most 10000', usage);
  return n;
}

export function checkReference(text: string, usage: string): string {
  if (!isWellFormedReference(text)) throw new UsageError('a reference is 1 to 200 characters without control characters', usage);
  return text;
}

export function requireMerchant(value: string | undefined, command: string, usage: string): string {
  if (value === undefined || value.trim() === '') throw new UsageError(`${command} needs --merchant <id>`, usage);
  if (value.length > 200) throw new UsageError('--merchant takes an id of at most 200 characters', usage);
  return value;
}
