import { randomUUID } from 'node:crypto';
import { type BrokerConnection, BrokerUnavailableError, type Consumer, type Delivery } from '../broker/index.js';
import { ENTRY_TYPES, HEADERS } from '../contracts/index.js';
import type { Logger } from '../logger/index.js';
import { appendCheckpoint, isCheckpoint } from './checkpoint.js';
import { type Claim, decodeClaim, decodeResolution, entryTypeOf, failureKeysOf, offsetOf, type Resolution } from './entries.js';
import { firstOffset } from './reader.js';

/** An unresolved failure entry, as much as the index keeps of it. */
interface Failure {
  merchantId: string;
  references: string[];
  webhookId: string;
  /** The claim that won this entry, in stream order, and when it was made (its maker's clock). */
  claim?: { id: string; at: number };
}

export interface FailedIndexOptions {
  /** A claim not followed by a resolution stops holding its entries after this long. */
  claimLeaseMs?: number;
  /** How often entries that retention removed from the stream are dropped from the index. */
  retentionCheckMs?: number;
  /** Backoff for a checkpoint append that failed, so readiness recovers without a reconnect. */
  checkpointRetryMs?: readonly number[];
  /** A checkpoint not confirmed within this (flow control) is appended again. */
  checkpointDeadlineMs?: number;
}

/**
 * `(merchantId, reference) → offsets of unresolved failure entries`, built by tailing the failed
 * stream from its first offset and following it live. Ready once the replay has reached the
 * checkpoint this instance appended after (re)connecting.
 *
 * Claims make a resend happen once across replicas: a resender appends a claim naming the entries
 * it wants, and every replica applies claims in stream order, so all agree that the first claim on
 * an entry wins it until its lease runs out or a resolution removes the entry.
 */
export class FailedIndex {
  private readonly failures = new Map<number, Failure>();
  private readonly byKey = new Map<string, number | number[]>();
  /** Unresolved entries per webhook (merchant + webhook-id): one webhook however many entries. */
  private readonly webhooks = new Map<string, number | number[]>();
  private readonly claimWaiters = new Map<string, { timer: NodeJS.Timeout; settle: (won: number[]) => void }>();
  private nextOffset: number | undefined;
  private checkpointId: string | undefined;
  private caughtUp = false;
  private consumer?: Consumer;
  private stopped = false;
  private checkpointTimer?: NodeJS.Timeout;
  private retentionTimer?: NodeJS.Timeout;
  readonly claimLeaseMs: number;
  private readonly onConnected = () => void this.appendCheckpoint();
  private readonly onDisconnected = () => {
    this.caughtUp = false;
  };

  constructor(
    private readonly broker: BrokerConnection,
    private readonly stream: string,
    private readonly logger: Logger,
    private readonly options: FailedIndexOptions = {},
  ) {
    this.claimLeaseMs = options.claimLeaseMs ?? 30_000;
  }

  get ready(): boolean {
    return this.caughtUp && this.broker.isConnected;
  }

  /** Unresolved failed webhooks: entries with the same webhook-id count once, a refund once. */
  get size(): number {
    return this.webhooks.size;
  }

  async start(): Promise<void> {
    this.broker.on('connected', this.onConnected);
    this.broker.on('disconnected', this.onDisconnected);
    this.consumer = await this.broker.consume(this.stream, {
      prefetch: 2_000,
      // After a reconnect, resume just past the last entry applied instead of replaying it all.
      arguments: () => ({ 'x-stream-offset': this.nextOffset ?? 'first' }),
      onMessage: (delivery) => this.apply(delivery),
    });
    await this.appendCheckpoint();
    const every = this.options.retentionCheckMs ?? 60_000;
    this.retentionTimer = setInterval(() => void this.dropExpired(), every);
    this.retentionTimer.unref();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.checkpointTimer);
    clearInterval(this.retentionTimer);
    this.broker.off('connected', this.onConnected);
    this.broker.off('disconnected', this.onDisconnected);
    await this.consumer?.cancel();
  }

  /** Offsets of this merchant's unresolved failures for a reference, oldest first. */
  lookup(merchantId: string, reference: string): number[] {
    return [...listOf(this.byKey.get(keyOf(merchantId, reference)))];
  }

  /** The webhook-id of an unresolved entry. */
  webhookIdAt(offset: number): string | undefined {
    return this.failures.get(offset)?.webhookId;
  }

  /** Every unresolved offset of the webhooks these offsets belong to: a resend takes them all. */
  withSameWebhooks(merchantId: string, offsets: number[]): number[] {
    const all = new Set(offsets);
    for (const offset of offsets) {
      const failure = this.failures.get(offset);
      if (!failure) continue;
      for (const other of listOf(this.webhooks.get(keyOf(merchantId, failure.webhookId)))) all.add(other);
    }
    return [...all].sort((a, b) => a - b);
  }

  /**
   * Resolves with the offsets this claim won once the stream brings it back to this replica; every
   * other replica reaches the same verdict from the same order.
   */
  awaitClaim(claimId: string, timeoutMs: number): Promise<number[]> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.claimWaiters.delete(claimId);
        reject(new BrokerUnavailableError(`claim ${claimId} not read back from ${this.stream} within ${timeoutMs} ms`));
      }, timeoutMs);
      this.claimWaiters.set(claimId, {
        timer,
        settle: (won) => {
          clearTimeout(timer);
          this.claimWaiters.delete(claimId);
          resolve(won);
        },
      });
    });
  }

  forgetClaim(claimId: string): void {
    clearTimeout(this.claimWaiters.get(claimId)?.timer);
    this.claimWaiters.delete(claimId);
  }

  /** Applies a resolution at once on this instance; the stream brings it to the others. */
  resolve(resolution: Resolution): void {
    for (const { offset } of resolution.resolved) this.removeFailure(offset);
  }

  private async appendCheckpoint(attempt = 0): Promise<void> {
    clearTimeout(this.checkpointTimer);
    this.caughtUp = false;
    const id = randomUUID();
    this.checkpointId = id;
    try {
      await appendCheckpoint(this.broker, this.stream, id, this.options.checkpointDeadlineMs ?? 10_000);
    } catch (err) {
      if (this.stopped) return;
      const backoff = this.options.checkpointRetryMs ?? [500, 1_000, 2_000, 5_000, 10_000, 30_000];
      const delay = backoff[Math.min(attempt, backoff.length - 1)]!;
      this.logger.warn('failed index checkpoint not appended; retrying', { error: (err as Error).message, retryInMs: delay });
      this.checkpointTimer = setTimeout(() => {
        if (this.checkpointId === id && !this.stopped) void this.appendCheckpoint(attempt + 1);
      }, delay);
      this.checkpointTimer.unref();
    }
  }

  /** Retention removes whole segments from the stream's head: drop what is now before its first offset. */
  private async dropExpired(): Promise<void> {
    if (!this.ready || this.failures.size === 0) return;
    let first: number | undefined;
    try {
      first = await firstOffset(this.broker, this.stream);
    } catch {
      return; // tried again at the next check
    }
    if (first === undefined) return;
    let dropped = 0;
    // Map order is stream order: stop at the first entry still in the stream.
    for (const offset of this.failures.keys()) {
      if (offset >= first) break;
      this.removeFailure(offset);
      dropped++;
    }
    if (dropped > 0) this.logger.info('failed entries expired by retention', { dropped, firstOffset: first });
  }

  private apply(delivery: Delivery): void {
    const { message } = delivery;
    const headers = message.properties.headers;
    const offset = offsetOf(headers);
    delivery.ack();
    if (offset === undefined) return;
    if (this.nextOffset !== undefined && offset < this.nextOffset) return; // already applied before a reconnect
    this.nextOffset = offset + 1;

    switch (entryTypeOf(headers)) {
      case ENTRY_TYPES.failure: {
        const keys = failureKeysOf(headers);
        if (!keys) return;
        const webhookId = headers?.[HEADERS.webhookId] ?? message.properties.messageId;
        this.addFailure(offset, {
          merchantId: keys.merchantId,
          references: [...new Set(keys.references)],
          webhookId: typeof webhookId === 'string' && webhookId.length > 0 ? webhookId : `offset:${offset}`,
        });
        return;
      }
      case ENTRY_TYPES.resolution: {
        const resolution = decodeResolution(message.content);
        if (resolution) this.resolve(resolution);
        return;
      }
      case ENTRY_TYPES.claim: {
        const claim = decodeClaim(message.content);
        if (claim) this.applyClaim(claim);
        return;
      }
      case ENTRY_TYPES.checkpoint:
        if (isCheckpoint(headers, this.checkpointId) && !this.caughtUp) {
          this.caughtUp = true;
          this.logger.info('failed index caught up', { unresolved: this.size, offset });
        }
        return;
      default:
        return;
    }
  }

  /** First claim wins; a claim whose lease ran out (by the claims' own clocks) can be taken over. */
  private applyClaim(claim: Claim): void {
    const won: number[] = [];
    for (const offset of claim.offsets) {
      const failure = this.failures.get(offset);
      if (!failure || failure.merchantId !== claim.merchantId) continue;
      if (claim.release) {
        if (failure.claim?.id === claim.claimId) failure.claim = undefined;
        continue;
      }
      if (failure.claim && claim.at - failure.claim.at < this.claimLeaseMs) continue;
      failure.claim = { id: claim.claimId, at: claim.at };
      won.push(offset);
    }
    this.claimWaiters.get(claim.claimId)?.settle(won);
  }

  private addFailure(offset: number, failure: Failure): void {
    this.failures.set(offset, failure);
    for (const reference of failure.references) addTo(this.byKey, keyOf(failure.merchantId, reference), offset);
    addTo(this.webhooks, keyOf(failure.merchantId, failure.webhookId), offset);
  }

  private removeFailure(offset: number): void {
    const failure = this.failures.get(offset);
    if (!failure) return;
    this.failures.delete(offset);
    for (const reference of failure.references) removeFrom(this.byKey, keyOf(failure.merchantId, reference), offset);
    removeFrom(this.webhooks, keyOf(failure.merchantId, failure.webhookId), offset);
  }
}

/** A multimap stored compactly: one offset as a number, several as an array (most keys have one). */
function addTo(map: Map<string, number | number[]>, key: string, offset: number): void {
  const existing = map.get(key);
  if (existing === undefined) map.set(key, offset);
  else if (typeof existing === 'number') map.set(key, [existing, offset]);
  else existing.push(offset);
}

function removeFrom(map: Map<string, number | number[]>, key: string, offset: number): void {
  const existing = map.get(key);
  if (existing === undefined) return;
  if (typeof existing === 'number') {
    if (existing === offset) map.delete(key);
    return;
  }
  const at = existing.indexOf(offset);
  if (at >= 0) existing.splice(at, 1);
  if (existing.length === 1) map.set(key, existing[0]!);
}

function listOf(value: number | number[] | undefined): number[] {
  return value === undefined ? [] : typeof value === 'number' ? [value] : value;
}

function keyOf(merchantId: string, reference: string): string {
  return `${merchantId}\u0000${reference}`;
}
