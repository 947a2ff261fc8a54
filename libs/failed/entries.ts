import type { MessageProperties } from 'amqplib';
import { z } from 'zod';
import { ENTRY_TYPES, HEADERS } from '../contracts/index.js';

/**
 * The failed stream holds four kinds of entries: failures (a webhook whose last attempt failed),
 * claims (a resender asking for failures; the first claim in stream order wins), resolutions
 * (those failures were resent) and checkpoints (a reader marking where it started, so it knows
 * when its replay has caught up).
 */
export type EntryType = (typeof ENTRY_TYPES)[keyof typeof ENTRY_TYPES];

const ENTRY_TYPE_VALUES: readonly unknown[] = Object.values(ENTRY_TYPES);

export function entryTypeOf(headers: Record<string, unknown> | undefined): EntryType | undefined {
  const type = headers?.[HEADERS.entryType];
  return ENTRY_TYPE_VALUES.includes(type) ? (type as EntryType) : undefined;
}


/** The merchant and the references a failure entry is found by (a refund: refundRef and tnxRef). */
export function failureKeysOf(headers: Record<string, unknown> | undefined): { merchantId: string; references: string[] } | undefined {
  const merchantId = headers?.[HEADERS.merchantId];
  if (typeof merchantId !== 'string') return undefined;
  const references = [headers?.[HEADERS.reference], headers?.[HEADERS.tnxRef]].filter(
    (r): r is string => typeof r === 'string' && r.length > 0,
  );
  return references.length > 0 ? { merchantId, references } : undefined;
}

const resolutionSchema = z.object({
  merchantId: z.string(),
  resolved: z.array(
    z.object({
      offset: z.number().int().nonnegative(),
      references: z.array(z.string()),
      /**
       * The webhook-id of the entry resolved. A resolution can land in a stream declared again
       * after a deletion, whose offsets started over; a reader resolves an entry only if it is of
       * this webhook. Absent in resolutions written before it was added: those go by offset alone.
       */
      webhookId: z.string().optional(),
    }),
  ),
});

export type Resolution = z.infer<typeof resolutionSchema>;

export function encodeResolution(resolution: Resolution): Buffer {
  return Buffer.from(JSON.stringify(resolution));
}

/** Undefined for a body that is not a resolution: a replica skips it rather than stop replaying. */
export function decodeResolution(content: Buffer): Resolution | undefined {
  return decodeJson(resolutionSchema, content);
}

const claimSchema = z.object({
  claimId: z.string().min(1).max(100),
  merchantId: z.string(),
  /** Milliseconds since the epoch on the claimant's clock: for operators only, no decision reads it. */
  at: z.number().int().nonnegative(),
  offsets: z.array(z.number().int().nonnegative()).max(10_000),
  /**
   * Claims whose lease the claimant saw run out on its own monotonic clock: their entries go to
   * this claim. Every replica decides from the stream alone, so none compares two hosts' clocks.
   */
  takesOver: z.array(z.string().min(1).max(100)).max(10_000).optional(),
  /** The reference the offsets were looked up by: only that merchant's entries for it can be won. */
  reference: z.string().optional(),
  /** Gives back the entries this claim won but did not resend (its republish failed). */
  release: z.boolean().optional(),
  /** Who claimed, for operators reading the stream: a replica's connection name and pid. */
  by: z.string().max(200).optional(),
});

export type Claim = z.infer<typeof claimSchema>;

export function encodeClaim(claim: Claim): Buffer {
  return Buffer.from(JSON.stringify(claim));
}

export function decodeClaim(content: Buffer): Claim | undefined {
  return decodeJson(claimSchema, content);
}

/**
 * The webhook-id a failure entry carries (its header, else its messageId); undefined when it has
 * none, which callers replace with one of their own for that offset.
 */
export function webhookIdOf(entry: { properties: MessageProperties }): string | undefined {
  const id = entry.properties.headers?.[HEADERS.webhookId] ?? entry.properties.messageId;
  return typeof id === 'string' && id.length > 0 ? id : undefined;
}

/**
 * What a failure entry is known by across deletions of the stream: its x-failure-id, or for an
 * entry written before failure ids, its failure time with its offset (a stream declared again
 * starts its offsets over, but not at the same millisecond). Undefined when it carries neither.
 */
export function failureIdOf(entry: { properties: MessageProperties }, offset: number): string | undefined {
  const headers = entry.properties.headers;
  const id = headers?.[HEADERS.failureId];
  if (typeof id === 'string' && id.length > 0 && id.length <= 200) return id;
  const failedAt = headers?.[HEADERS.failedAt];
  return typeof failedAt === 'string' && failedAt.length > 0 && failedAt.length <= 40 ? `${failedAt}#${offset}` : undefined;
}

/** The event name a failure entry carries; undefined for an entry written without it. */
export function eventOf(entry: { properties: MessageProperties }): string | undefined {
  const event = entry.properties.headers?.[HEADERS.event];
  return typeof event === 'string' && event.length > 0 ? event : undefined;
}

function decodeJson<T>(schema: z.ZodType<T>, content: Buffer): T | undefined {
  try {
    const parsed = schema.safeParse(JSON.parse(content.toString('utf8')));
    return parsed.success ? parsed.data : undefined;
  } catch {
    return undefined;
  }
}
