import type { MessageProperties } from 'amqplib';
import { HEADERS } from '../contracts/index.js';
import { failureKeysOf } from './entries.js';

/** A failure entry as operators see it: its story, read from the headers the dispatcher wrote. */
export interface FailureRecord {
  offset: number;
  failedAt?: string;
  firstSeenAt?: string;
  merchantId: string;
  event?: string;
  /** Primary reference first; a refund also has its tnxRef. */
  references: string[];
  webhookId?: string;
  attempts?: number;
  lastStatus?: number;
  lastError?: string;
  /** x-failed-reason: attempts-exhausted, circuit-open, webhook-disabled, ... (FAILED_REASONS). */
  failedReason?: string;
  /** A later resolution entry names this offset: it was resent. */
  resolved: boolean;
}

/** Undefined for an entry without a merchant and a reference: nothing could find or resend it. */
export function failureRecordOf(offset: number, properties: Pick<MessageProperties, 'headers' | 'messageId'>): FailureRecord | undefined {
  const headers = properties.headers;
  const keys = failureKeysOf(headers);
  if (!keys) return undefined;
  return {
    offset,
    failedAt: text(headers?.[HEADERS.failedAt]) ?? text(headers?.[HEADERS.lastAttemptAt]),
    firstSeenAt: text(headers?.[HEADERS.firstSeenAt]),
    merchantId: keys.merchantId,
    event: text(headers?.[HEADERS.event]),
    references: keys.references,
    webhookId: text(headers?.[HEADERS.webhookId]) ?? text(properties.messageId),
    attempts: count(headers?.[HEADERS.attempts]),
    lastStatus: count(headers?.[HEADERS.lastStatus]),
    lastError: text(headers?.[HEADERS.lastError]),
    failedReason: text(headers?.[HEADERS.failedReason]),
    resolved: false,
  };
}

/** Milliseconds since the epoch of the failure, or undefined when the entry carries no valid time. */
export function failedAtMs(record: FailureRecord): number | undefined {
  if (record.failedAt === undefined) return undefined;
  const ms = Date.parse(record.failedAt);
  return Number.isFinite(ms) ? ms : undefined;
}

function text(value: unknown): string | undefined {
  return typeof value === 'string' && value.length > 0 ? value : undefined;
}

function count(value: unknown): number | undefined {
  const n = typeof value === 'number' ? value : typeof value === 'string' ? Number(value) : NaN;
  return Number.isFinite(n) ? n : undefined;
}
