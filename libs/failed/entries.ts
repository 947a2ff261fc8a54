import { z } from 'zod';
import { ENTRY_TYPES, HEADERS } from '../contracts/index.js';

/**
 * The failed stream holds three kinds of entries: failures (a webhook whose last attempt failed),
 * resolutions (those failures were resent) and checkpoints (an API instance marking where it
 * started, so it knows when its replay has caught up).
 */
export type EntryType = (typeof ENTRY_TYPES)[keyof typeof ENTRY_TYPES];

export function entryTypeOf(headers: Record<string, unknown> | undefined): EntryType | undefined {
  const type = headers?.[HEADERS.entryType];
  return type === ENTRY_TYPES.failure || type === ENTRY_TYPES.resolution || type === ENTRY_TYPES.checkpoint
    ? type
    : undefined;
}

export function offsetOf(headers: Record<string, unknown> | undefined): number | undefined {
  const offset = headers?.[HEADERS.streamOffset];
  return typeof offset === 'number' && Number.isSafeInteger(offset) && offset >= 0 ? offset : undefined;
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
  resolved: z.array(z.object({ offset: z.number().int().nonnegative(), references: z.array(z.string()) })),
});

export type Resolution = z.infer<typeof resolutionSchema>;

export function encodeResolution(resolution: Resolution): Buffer {
  return Buffer.from(JSON.stringify(resolution));
}

/** Undefined for a body that is not a resolution: a replica skips it rather than stop replaying. */
export function decodeResolution(content: Buffer): Resolution | undefined {
  try {
    const parsed = resolutionSchema.safeParse(JSON.parse(content.toString('utf8')));
    return parsed.success ? parsed.data : undefined;
  } catch {
    return undefined;
  }
}
