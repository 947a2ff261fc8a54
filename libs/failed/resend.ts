import { randomUUID } from 'node:crypto';
import type { ConsumeMessage } from 'amqplib';
import { BrokerUnavailableError, type BrokerConnection } from '../broker/index.js';
import { HEADERS, type ScalarHeaders, scalarHeaders } from '../contracts/index.js';
import type { Logger } from '../logger/index.js';
import { type TopologyNames, topologyNames } from '../topology/index.js';
import { appendClaim, appendResolution } from './append.js';
import { type Claim, failureKeysOf, type Resolution, webhookIdOf } from './entries.js';
import type { FailedIndex } from './failed-index.js';
import { EntryExpiredError, readEntryAt } from './reader.js';

/** Headers that describe past attempts: a resent webhook starts with fresh counters. */
const ATTEMPT_HEADERS: string[] = [
  HEADERS.attempts,
  HEADERS.deferrals,
  HEADERS.postponements,
  HEADERS.lastStatus,
  HEADERS.lastError,
  HEADERS.lastAttemptAt,
  HEADERS.failedAt,
  HEADERS.failedReason,
  HEADERS.entryType,
  HEADERS.streamOffset,
];

/** The unresolved entries of one webhook, and the newest still in the stream (absent: all expired). */
interface WebhookEntries {
  offsets: number[];
  newest?: { entry: ConsumeMessage; offset: number };
}

export class NothingToResendError extends Error {
  constructor() {
    super('no unresolved failed webhook for this merchant and reference');
    this.name = 'NothingToResendError';
  }
}

export interface ResendOptions {
  now?: () => Date;
  /** Each publish of a resend (claim, republish, resolution) is confirmed within this or fails (503). */
  publishDeadlineMs?: number;
  /** Names this replica in its claims, for operators reading the stream. */
  replica?: string;
}

/**
 * Resends a merchant's failed webhooks for a reference, once, however many replicas are asked at
 * the same moment. It appends a claim naming the entries to the failed stream and waits to read it
 * back: every replica applies claims in stream order, so the first claim on an entry wins it
 * everywhere, and a later claim wins nothing (NothingToResendError: 404). The winner republishes
 * one copy per webhook-id to `dispatch` and appends a resolution for each webhook as soon as it is
 * republished, so a resend that fails half-way is retried without sending again what went out.
 * The claim's lease frees entries whose claimant died before resolving them.
 */
export class ResendService {
  private readonly names: TopologyNames;
  private readonly now: () => Date;
  private readonly deadlineMs: number;

  constructor(
    private readonly broker: BrokerConnection,
    private readonly index: FailedIndex,
    prefix: string,
    private readonly logger: Logger,
    private readonly options: ResendOptions = {},
  ) {
    this.names = topologyNames(prefix);
    this.now = options.now ?? (() => new Date());
    this.deadlineMs = options.publishDeadlineMs ?? 5_000;
  }

  async resend(merchantId: string, reference: string): Promise<number> {
    const offsets = this.index.lookup(merchantId, reference);
    if (offsets.length === 0) throw new NothingToResendError();
    const claim = this.newClaim(merchantId, reference, offsets);
    const won = await this.claim(claim);
    if (won.length === 0) throw new NothingToResendError();

    // Entries of one webhook share its hash (a webhook split in two by a connection drop).
    const byHash = new Map<number, number[]>();
    for (const offset of won) {
      const hash = this.index.webhookHashAt(offset) ?? -offset - 1;
      byHash.set(hash, [...(byHash.get(hash) ?? []), offset]);
    }
    let sent = 0;
    const settled = new Set<number>();
    try {
      for (const candidates of byHash.values()) {
        for (const group of await this.sameWebhooks(candidates)) {
          // Entries of one webhook carry the same body and webhook-id: send it once, the newest.
          if (!group.newest) {
            // Retention removed it: it cannot be resent, and every replica drops it the same way.
            this.index.resolve({ merchantId, resolved: group.offsets.map((offset) => ({ offset, references: [reference] })) });
            for (const offset of group.offsets) settled.add(offset);
            continue;
          }
          const { entry, offset } = group.newest;
          await this.republish(entry, offset);
          const references = failureKeysOf(entry.properties.headers)?.references ?? [reference];
          await this.appendResolution({ merchantId, resolved: group.offsets.map((offset) => ({ offset, references })) }, reference);
          for (const offset of group.offsets) settled.add(offset);
          sent++;
        }
      }
    } catch (err) {
      // Give back what was not resent, so a retry need not wait for the lease.
      const left = won.filter((offset) => !settled.has(offset));
      if (left.length > 0) await this.appendClaim({ ...claim, offsets: left, release: true }).catch(() => {});
      throw err;
    }
    if (sent === 0) throw new NothingToResendError();
    this.logger.info('failed webhooks resent', { merchantId, reference, count: sent });
    return sent;
  }

  /** Appends a claim and waits for the stream's verdict: the offsets this claim won. */
  private async claim(claim: Claim): Promise<number[]> {
    const verdict = this.index.awaitClaim(claim.claimId, 2 * this.deadlineMs);
    try {
      await this.appendClaim(claim);
    } catch (err) {
      this.index.forgetClaim(claim.claimId);
      verdict.catch(() => {});
      // Not confirmed is not "not stored": a blocked claim may land later. A release published
      // after it on the same channel lands after it too, so the entries are not held for a lease.
      void this.appendClaim({ ...claim, release: true }).catch(() => {});
      throw err;
    }
    return verdict;
  }

  private newClaim(merchantId: string, reference: string, offsets: number[]): Claim {
    return { claimId: randomUUID(), merchantId, reference, at: this.now().getTime(), offsets, by: this.options.replica };
  }

  /**
   * Splits offsets whose webhook-ids hash alike into webhooks, by the webhook-ids the entries
   * really carry. `newest` is the entry to republish, absent when retention removed it.
   */
  private async sameWebhooks(offsets: number[]): Promise<WebhookEntries[]> {
    const read = async (offset: number): Promise<ConsumeMessage | undefined> => {
      try {
        return await readEntryAt(this.broker, this.names.failed, offset);
      } catch (err) {
        if (err instanceof EntryExpiredError) return undefined;
        throw err;
      }
    };
    const groups = new Map<string, WebhookEntries>();
    for (const offset of offsets) {
      const entry = await read(offset);
      const id = (entry && webhookIdOf(entry)) ?? `offset:${offset}`;
      const group = groups.get(id) ?? { offsets: [] };
      group.offsets.push(offset);
      if (entry) group.newest = { entry, offset };
      groups.set(id, group);
    }
    return [...groups.values()];
  }

  private appendClaim(claim: Claim): Promise<void> {
    return appendClaim(this.broker, this.names.failed, claim, this.deadlineMs);
  }

  private async appendResolution(resolution: Resolution, reference: string): Promise<void> {
    await appendResolution(this.broker, this.names.failed, resolution, { reference, resentAt: this.now(), deadlineMs: this.deadlineMs });
    this.index.resolve(resolution);
  }

  private async republish(entry: ConsumeMessage, offset: number): Promise<void> {
    const headers: ScalarHeaders = scalarHeaders(entry.properties.headers);
    for (const name of ATTEMPT_HEADERS) delete headers[name];
    headers[HEADERS.resentAt] = this.now().toISOString();
    headers[HEADERS.resentFromOffset] = offset;
    try {
      await this.broker.sendToQueue(
        this.names.dispatch,
        entry.content,
        {
          persistent: true,
          contentType: entry.properties.contentType ?? 'application/json',
          messageId: entry.properties.messageId ?? (headers[HEADERS.webhookId] as string | undefined),
          timestamp: entry.properties.timestamp,
          headers,
        },
        this.deadlineMs,
      );
    } catch (err) {
      if (err instanceof BrokerUnavailableError) throw err;
      throw new BrokerUnavailableError('resend publish failed', { cause: err });
    }
  }
}
