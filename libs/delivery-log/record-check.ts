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

const isObject = (v: unknown): v is Entry => typeof v === 'object' && v !== null && !Array.isArray(v);
const isText = (v: unknown, min: number, max: number): v is string => typeof v === 'string' && v.length >= min && v.length <= max;
const isTime = (v: unknown): v is string => typeof v === 'string' && DATETIME.test(v);
const isCount = (v: unknown): v is number => Number.isSafeInteger(v) && (v as number) >= 0;

function attemptOf(a: unknown): DeliveryRecord['attempt'] | null {
  if (!isObject(a) || !isTime(a.startedAt) || !isCount(a.durationMs)) return null;
  const out: NonNullable<DeliveryRecord['attempt']> = { startedAt: a.startedAt, durationMs: a.durationMs };
  if (a.httpStatus !== undefined) {
    if (!Number.isSafeInteger(a.httpStatus) || (a.httpStatus as number) < 100 || (a.httpStatus as number) > 599) return null;
    out.httpStatus = a.httpStatus as number;
  }
  if (a.error !== undefined) {
    if (!isText(a.error, 0, 1000)) return null;
    out.error = a.error;
  }
  if (a.responseBody !== undefined) {
    if (typeof a.responseBody !== 'string') return null;
    out.responseBody = a.responseBody;
  }
  return out;
}

/** The record as deliveryRecordSchema would parse it, or undefined when this check cannot tell (ask zod). */
export function checkRecord(e: unknown): DeliveryRecord | undefined {
  if (!isObject(e)) return undefined;
  const refs = e.references;
  if (
    !(typeof e.id === 'string' && UUID.test(e.id)) ||
    !isTime(e.at) ||
    !isText(e.webhookId, 1, 200) ||
    !isText(e.merchantId, 1, 200) ||
    !isText(e.event, 1, 100) ||
    !Array.isArray(refs) ||
    refs.length > 4 ||
    !refs.every((r) => isText(r, 1, 200)) ||
    !isTime(e.firstSeenAt) ||
    !outcomes.has(e.outcome) ||
    !isCount(e.attemptNumber)
  ) {
    return undefined;
  }
  // Keys in the schema's order, as zod builds them.
  const out = { id: e.id, at: e.at, webhookId: e.webhookId, merchantId: e.merchantId } as DeliveryRecord;
  if (e.endpointId !== undefined) {
    if (!isText(e.endpointId, 1, 200)) return undefined;
    out.endpointId = e.endpointId;
  }
  out.event = e.event;
  out.references = [...(refs as string[])];
  if (e.payload !== undefined) {
    if (typeof e.payload !== 'string') return undefined;
    out.payload = e.payload;
  }
  out.firstSeenAt = e.firstSeenAt;
  out.outcome = e.outcome as DeliveryRecord['outcome'];
  out.attemptNumber = e.attemptNumber;
  if (e.resend !== undefined) {
    if (!isCount(e.resend)) return undefined;
    out.resend = e.resend;
  }
  if (e.attempt !== undefined) {
    const attempt = attemptOf(e.attempt);
    if (!attempt) return undefined;
    out.attempt = attempt;
  }
  if (e.nextAttemptAt !== undefined) {
    if (!isTime(e.nextAttemptAt)) return undefined;
    out.nextAttemptAt = e.nextAttemptAt;
  }
  if (e.reason !== undefined) {
    if (!isText(e.reason, 0, 200)) return undefined;
    out.reason = e.reason;
  }
  return out;
}
