import { type DeliveryRecord, OUTCOMES } from './record.js';

/*
 * zod's safeParse cost ~12 µs a record, a fifth of storing one. This check accepts a record only
 * where deliveryRecordSchema would, and builds the same output; what it does not accept goes to
 * zod. So it may only be stricter than the schema, never looser (test/unit/record-check.test.ts).
 */

// zod 4's patterns for z.uuid() and z.iso.datetime({ offset: true }), copied from zod/v4/core/regexes.
const UUID = /^([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[1-8][0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}|00000000-0000-0000-0000-000000000000|ffffffff-ffff-ffff-ffff-ffffffffffff)$/;
const DATE = '(?:(?:\\d\\d[2468][048]|\\d\\d[13579][26]|\\d\\d0[48]|[02468][048]00|[13579][26]00)-02-29|\\d{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\\d|30)|(?:02)-(?:0[1-9]|1\\d|2[0-8])))';
const DATETIME = new RegExp(`^${DATE}T(?:(?:[01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d(?:\\.\\d+)?(?:Z|([+-](?:[01]\\d|2[0-3]):[0-5]\\d)))$`);

const outcomes: ReadonlySet<unknown> = new Set(OUTCOMES);

type Entry = Record<string, unknown>;
/** A field's name, what it becomes (NO: not accepted), and whether it may be absent. */
type Field = readonly [key: string, parse: (v: unknown) => unknown, optional?: boolean];

const NO = Symbol('not accepted');
const when = (ok: (v: unknown) => boolean) => (v: unknown) => (ok(v) ? v : NO);
const isObject = (v: unknown): v is Entry => typeof v === 'object' && v !== null && !Array.isArray(v);
const isText = (min: number, max: number) => (v: unknown) => typeof v === 'string' && v.length >= min && v.length <= max;
const isTime = (v: unknown) => typeof v === 'string' && DATETIME.test(v);
const isCount = (v: unknown) => Number.isSafeInteger(v) && (v as number) >= 0;

/** The known fields of `e`, in the order given (zod builds its output in the schema's order), or undefined. */
function pick(e: Entry, fields: readonly Field[]): Entry | undefined {
  const out: Entry = {};
  for (const [key, parse, optional] of fields) {
    if (optional && e[key] === undefined) continue;
    const value = parse(e[key]);
    if (value === NO) return undefined;
    out[key] = value;
  }
  return out;
}

const ATTEMPT: readonly Field[] = [
  ['startedAt', when(isTime)],
  ['durationMs', when(isCount)],
  ['httpStatus', when((v) => Number.isSafeInteger(v) && (v as number) >= 100 && (v as number) <= 599), true],
  ['error', when(isText(0, 1000)), true],
  ['responseBody', when((v) => typeof v === 'string'), true],
];

const RECORD: readonly Field[] = [
  ['id', when((v) => typeof v === 'string' && UUID.test(v))],
  ['at', when(isTime)],
  ['webhookId', when(isText(1, 200))],
  ['merchantId', when(isText(1, 200))],
  ['endpointId', when(isText(1, 200)), true],
  ['event', when(isText(1, 100))],
  ['references', (v) => (Array.isArray(v) && v.length <= 4 && v.every(isText(1, 200)) ? [...(v as string[])] : NO)],
  ['payload', when((v) => typeof v === 'string'), true],
  ['firstSeenAt', when(isTime)],
  ['outcome', when((v) => outcomes.has(v))],
  ['attemptNumber', when(isCount)],
  ['resend', when(isCount), true],
  ['attempt', (v) => (isObject(v) ? (pick(v, ATTEMPT) ?? NO) : NO), true],
  ['nextAttemptAt', when(isTime), true],
  ['reason', when(isText(0, 200)), true],
];

/** The record as deliveryRecordSchema would parse it, or undefined when this check cannot tell (ask zod). */
export function checkRecord(e: unknown): DeliveryRecord | undefined {
  return isObject(e) ? (pick(e, RECORD) as DeliveryRecord | undefined) : undefined;
}
