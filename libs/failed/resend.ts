import type { ConsumeMessage } from 'amqplib';
import { BrokerUnavailableError, type BrokerConnection } from '../broker/index.js';
import { ENTRY_TYPES, HEADERS, type ScalarHeaders, scalarHeaders } from '../contracts/index.js';
import type { Logger } from '../logger/index.js';
import { type TopologyNames, topologyNames } from '../topology/index.js';
import { encodeResolution, failureKeysOf, type Resolution } from './entries.js';
import type { FailedIndex } from './failed-index.js';
import { EntryExpiredError, readEntryAt } from './reader.js';

/** Headers that describe past attempts: a resent webhook starts with fresh attempt counters. */
const ATTEMPT_HEADERS: string[] = [
  HEADERS.attempts,
  HEADERS.lastStatus,
  HEADERS.lastError,
  HEADERS.lastAttemptAt,
  HEADERS.failedAt,
  HEADERS.entryType,
  HEADERS.streamOffset,
];

export class NothingToResendError extends Error {
  constructor() {
    super('no unresolved failed webhook for this merchant and reference');
    this.name = 'NothingToResendError';
  }
}

/**
 * Resends a merchant's failed webhooks for a reference: reads each entry at its offset,
 * republishes it to `dispatch` with its webhook-id (confirmed), then appends a resolution entry.
 * Resends of one key run one at a time, so a double click sends once.
 */
export class ResendService {
  private readonly names: TopologyNames;
  private readonly locks = new Map<string, Promise<unknown>>();

  constructor(
    private readonly broker: BrokerConnection,
    private readonly index: FailedIndex,
    prefix: string,
    private readonly logger: Logger,
    private readonly now: () => Date = () => new Date(),
  ) {
    this.names = topologyNames(prefix);
  }

  async resend(merchantId: string, reference: string): Promise<number> {
    const key = `${merchantId}\u0000${reference}`;
    const previous = this.locks.get(key) ?? Promise.resolve();
    const run = previous.catch(() => {}).then(() => this.resendNow(merchantId, reference));
    this.locks.set(key, run);
    try {
      return await run;
    } finally {
      if (this.locks.get(key) === run) this.locks.delete(key);
    }
  }

  private async resendNow(merchantId: string, reference: string): Promise<number> {
    const offsets = this.index.lookup(merchantId, reference);
    if (offsets.length === 0) throw new NothingToResendError();

    const resolution: Resolution = { merchantId, resolved: [] };
    const expired: Resolution = { merchantId, resolved: [] };
    for (const offset of offsets) {
      let entry: ConsumeMessage;
      try {
        entry = await readEntryAt(this.broker, this.names.failed, offset);
      } catch (err) {
        if (!(err instanceof EntryExpiredError)) throw err;
        expired.resolved.push({ offset, references: [reference] });
        continue;
      }
      await this.republish(entry, offset);
      resolution.resolved.push({ offset, references: failureKeysOf(entry.properties.headers)?.references ?? [reference] });
    }
    // Entries that retention removed are dropped from this index; they cannot be resent.
    this.index.resolve(expired);
    if (resolution.resolved.length === 0) throw new NothingToResendError();

    await this.broker.sendToQueue(this.names.failed, encodeResolution(resolution), {
      contentType: 'application/json',
      headers: {
        [HEADERS.entryType]: ENTRY_TYPES.resolution,
        [HEADERS.merchantId]: merchantId,
        [HEADERS.reference]: reference,
        [HEADERS.resolvedOffsets]: resolution.resolved.map((r) => r.offset).join(','),
        [HEADERS.resentAt]: this.now().toISOString(),
      },
    });
    this.index.resolve(resolution);
    this.logger.info('failed webhooks resent', { merchantId, reference, count: resolution.resolved.length });
    return resolution.resolved.length;
  }

  private async republish(entry: ConsumeMessage, offset: number): Promise<void> {
    const headers: ScalarHeaders = scalarHeaders(entry.properties.headers);
    for (const name of ATTEMPT_HEADERS) delete headers[name];
    headers[HEADERS.resentAt] = this.now().toISOString();
    headers[HEADERS.resentFromOffset] = offset;
    try {
      await this.broker.sendToQueue(this.names.dispatch, entry.content, {
        persistent: true,
        contentType: entry.properties.contentType ?? 'application/json',
        messageId: entry.properties.messageId ?? (headers[HEADERS.webhookId] as string | undefined),
        timestamp: entry.properties.timestamp,
        headers,
      });
    } catch (err) {
      if (err instanceof BrokerUnavailableError) throw err;
      throw new BrokerUnavailableError('resend publish failed', { cause: err });
    }
  }
}
