import { z } from 'zod';
import { type DeliveryRecord, deliveryRecordSchema, OUTCOMES } from './record.js';

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
const isString = (v: unknown): v is string => typeof v === 'string';
const isName = (v: unknown): v is string => isText(v, 1, 200);
const isStatus = (v: unknown) => Number.isSafeInteger(v) && (v as number) >= 100 && (v as number) <= 599;
const optional = (v: unknown, ok: (v: unknown) => boolean) => v === undefined || ok(v);

function attemptOf(a: unknown): DeliveryRecord['attempt'] | null {
  if (!isObject(a) || !isTime(a.startedAt) || !isCount(a.durationMs)) return null;
  if (!optional(a.httpStatus, isStatus) || !optional(a.error, (v) => isText(v, 0, 1000)) || !optional(a.responseBody, isString)) return null;
  const out: NonNullable<DeliveryRecord['attempt']> = { startedAt: a.startedAt, durationMs: a.durationMs };
  if (a.httpStatus !== undefined) out.httpStatus = a.httpStatus as number;
  if (a.error !== undefined) out.error = a.error as string;
  if (a.responseBody !== undefined) out.responseBody = a.responseBody as string;
  return out;
}

/** The record as deliveryRecordSchema would parse it, or undefined when this check cannot tell (ask zod). */
export function checkRecord(e: unknown): DeliveryRecord | undefined {
  if (!isObject(e)) return undefined;
  const refs = e.references;
  if (
    !(typeof e.id === 'string' && UUID.test(e.id)) ||
    !isTime(e.at) ||
    !isName(e.webhookId) ||
    !isName(e.merchantId) ||
    !isText(e.event, 1, 100) ||
    !Array.isArray(refs) ||
    refs.length > 4 ||
    !refs.every(isName) ||
    !isTime(e.firstSeenAt) ||
    !outcomes.has(e.outcome) ||
    !isCount(e.attemptNumber) ||
    !optional(e.endpointId, isName) ||
    !optional(e.payload, isString) ||
    !optional(e.resend, isCount) ||
    !optional(e.nextAttemptAt, isTime) ||
    !optional(e.reason, (v) => isText(v, 0, 200))
  ) {
    return undefined;
  }
  const attempt = e.attempt === undefined ? undefined : attemptOf(e.attempt);
  if (attempt === null) return undefined;
  // Keys in the schema's order, as zod builds them.
  const out = { id: e.id, at: e.at, webhookId: e.webhookId, merchantId: e.merchantId } as DeliveryRecord;
  if (e.endpointId !== undefined) out.endpointId = e.endpointId as string;
  out.event = e.event;
  out.references = [...(refs as string[])];
  if (e.payload !== undefined) out.payload = e.payload as string;
  out.firstSeenAt = e.firstSeenAt;
  out.outcome = e.outcome as DeliveryRecord['outcome'];
  out.attemptNumber = e.attemptNumber;
  if (e.resend !== undefined) out.resend = e.resend as number;
  if (attempt) out.attempt = attempt;
  if (e.nextAttemptAt !== undefined) out.nextAttemptAt = e.nextAttemptAt as string;
  if (e.reason !== undefined) out.reason = e.reason as string;
  return out;
}

/** An entry of a stream message that is not a record, with its place (-1: the whole message) and why. */
export interface RefusedEntry {
  position: number;
  error: string;
  /** The entry as JSON text, or the message's first bytes when it was not a JSON array. */
  content: string;
}

/**
 * The records of one stream message, each with its place in the message's array; what is not JSON
 * or does not match is refused. checkRecord accepts the well-formed cheaply; zod decides the rest and says why.
 */
export function decodeRecords(body: Buffer): { records: DeliveryRecord[]; positions: number[]; refused: RefusedEntry[] } {
  const whole = (reason: string) => ({ records: [], positions: [], refused: [{ position: -1, error: reason, content: body.subarray(0, 64 * 1024).toString('utf8') }] });
  let parsed: unknown;
  try {
    parsed = JSON.parse(body.toString('utf8'));
  } catch {
    return whole('not JSON');
  }
  if (!Array.isArray(parsed)) return whole('not a JSON array');
  const records: DeliveryRecord[] = [];
  const positions: number[] = [];
  const refused: RefusedEntry[] = [];
  for (const [i, entry] of (parsed as unknown[]).entries()) {
    const checked = checkRecord(entry);
    const result = checked ? { success: true as const, data: checked } : deliveryRecordSchema.safeParse(entry);
    if (result.success) {
      records.push(result.data);
      positions.push(i);
    } else {
      refused.push({ position: i, error: z.prettifyError(result.error), content: JSON.stringify(entry) ?? 'undefined' });
    }
  }
  return { records, positions, refused };
}
