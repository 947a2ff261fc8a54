import { z } from 'zod';
import type { BrokerConnection } from '../broker/index.js';
import { HEADERS } from '../contracts/index.js';
import { merchantSchema, type Merchant } from './schema.js';

/**
 * One entry of the merchants stream: a merchant's whole settings at one version. The latest
 * version of each merchant wins; versions count up by one per change, so two writers that raced
 * from the same version cannot both win, and a refresh (the same version written again so that
 * retention never removes it) can never undo a newer change.
 */
export interface SettingsEntry {
  merchantId: string;
  version: number;
  entryId: string;
  writtenAt: string;
  /** `change` for a write, `refresh` for the same settings appended again to outlive retention. */
  kind: 'change' | 'refresh';
  merchant: Merchant;
  /**
   * The admin write's Idempotency-Key and its result, in the entry that made the change: whichever
   * replica reads it (after a restart too) answers a repeat of the key with this result.
   */
  idempotency?: IdempotencyRecord;
}

export interface IdempotencyRecord {
  key: string;
  /** Hash of the operation, merchant and input: the same key for another request is refused. */
  fingerprint: string;
  result: unknown;
}

export const SETTINGS_ENTRY_TYPE = 'merchant-settings';
/** A marker a writer appends and reads back to know it has read everything written before it. */
export const SYNC_ENTRY_TYPE = 'merchant-settings-sync';

const entrySchema = z.object({
  merchantId: z.string().min(1).max(200),
  version: z.number().int().positive(),
  entryId: z.string().min(1).max(100),
  writtenAt: z.string(),
  kind: z.enum(['change', 'refresh']),
  merchant: merchantSchema,
  idempotency: z.object({ key: z.string().min(1).max(255), fingerprint: z.string().min(1).max(200), result: z.unknown() }).optional(),
});

/** Undefined for anything that is not a valid entry: a reader skips it, it never stops the replay. */
export function decodeSettingsEntry(content: Buffer): SettingsEntry | undefined {
  try {
    const parsed = entrySchema.safeParse(JSON.parse(content.toString('utf8')));
    return parsed.success && parsed.data.merchant.id === parsed.data.merchantId ? parsed.data : undefined;
  } catch {
    return undefined;
  }
}

/** Headers name the merchant and version for the console; the secret stays in the body only. */
export function appendSettingsEntry(broker: BrokerConnection, stream: string, entry: SettingsEntry, deadlineMs: number): Promise<void> {
  return broker.sendToQueue(
    stream,
    Buffer.from(JSON.stringify(entry)),
    {
      contentType: 'application/json',
      headers: {
        [HEADERS.entryType]: SETTINGS_ENTRY_TYPE,
        [HEADERS.merchantId]: entry.merchantId,
        'x-settings-version': entry.version,
        'x-settings-kind': entry.kind,
      },
    },
    deadlineMs,
  );
}

/** Appends a sync marker: no settings, only its id (in a header, so readers need not parse a body). */
export function appendSyncEntry(broker: BrokerConnection, stream: string, syncId: string, deadlineMs: number): Promise<void> {
  return broker.sendToQueue(
    stream,
    Buffer.from('{}'),
    { contentType: 'application/json', headers: { [HEADERS.entryType]: SYNC_ENTRY_TYPE, 'x-sync-id': syncId } },
    deadlineMs,
  );
}
