import type { ConsumeMessage } from 'amqplib';
import type { BrokerConnection } from '../broker/index.js';
import { ENTRY_TYPES } from '../contracts/index.js';
import type { Logger } from '../logger/index.js';
import { ReadBacks, StreamTail } from '../streams/index.js';
import type { EntrySpool, SpooledEntry } from './entry-spool.js';
import { type Claim, decodeClaim, decodeResolution, entryTypeOf, failureKeysOf, type Resolution, webhookIdOf } from './entries.js';
import { firstOffset } from './reader.js';

/**
 * A claim that won an entry, in stream order, and when this replica read it on its own monotonic
 * clock: a lease is timed by each reader from what it saw, never from the claimant's clock.
 */
interface Held {
  id: string;
  seenAt: number;
}

/** A claim holding an entry, as this replica sees it. */
export interface Hold {
  claimId: string;
  /** Lease left by this replica's clock; 0 once it ran out. */
  remainingMs: number;
}

export interface FailedIndexOptions {
  /** Keeps a local copy of each failure entry read, so a resend need not open a stream consumer. */
  spool?: EntrySpool;
  /** A claim not followed by a resolution stops holding its entries after this long. */
  claimLeaseMs?: number;
  /** Times claim leases; monotonic, so a wall-clock step or a skewed host changes nothing. */
  monotonic?: () => number;
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
  /**
   * Memory is what bounds the index (about 150 bytes per entry at 1,000,000, BENCHMARKS.md), so
   * it holds numbers, not entries: the offsets per key, and per unresolved offset a 31-bit hash of
   * its webhook-id, in stream order. The hash only groups entries of one webhook; the resender
   * reads the entries themselves before it trusts a group of more than one.
   */
  private readonly byKey = new Map<string, number | number[]>();
  private readonly hashes = new Map<number, number>();
  /** Entries beyond the first of each webhook: size counts a webhook split in two once. */
  private duplicates = 0;
  private readonly claims = new Map<number, Held>();
  private readonly claimWaiters = new ReadBacks<number[]>(() => void this.tail?.verifyLive());
  private readonly monotonic: () => number;
  private readonly tail: StreamTail;
  private retentionTimer?: NodeJS.Timeout;
  readonly claimLeaseMs: number;

  constructor(
    private readonly broker: BrokerConnection,
    private readonly stream: string,
    private readonly logger: Logger,
    private readonly options: FailedIndexOptions = {},
  ) {
    this.claimLeaseMs = options.claimLeaseMs ?? 30_000;
    this.monotonic = options.monotonic ?? (() => performance.now());
    this.tail = new StreamTail(broker, stream, logger, {
      prefetch: 2_000,
      onEntry: (message, offset) => this.apply(message, offset),
      onCaughtUp: (offset) => this.logger.info('failed index caught up', { unresolved: this.size, offset }),
      onReset: () => this.reset(),
      checkpointRetryMs: options.checkpointRetryMs,
      checkpointDeadlineMs: options.checkpointDeadlineMs,
    });
  }

  get ready(): boolean {
    return this.tail.ready;
  }

  /** Unresolved failed webhooks: entries with the same webhook-id count once, a refund once. */
  get size(): number {
    return this.hashes.size - this.duplicates;
  }

  async start(): Promise<void> {
    await this.tail.start();
    const every = this.options.retentionCheckMs ?? 60_000;
    this.retentionTimer = setInterval(() => void this.dropExpired(), every);
    this.retentionTimer.unref();
  }

  async stop(): Promise<void> {
    clearInterval(this.retentionTimer);
    await this.tail.stop();
    await this.options.spool?.close();
  }

  /** The failure entry at this offset from the local spool; undefined when the stream must be read. */
  async spooledEntryAt(offset: number): Promise<SpooledEntry | undefined> {
    return this.hashes.has(offset) ? this.options.spool?.get(offset) : undefined;
  }

  /** Offsets of this merchant's unresolved failures for a reference, oldest first. */
  lookup(merchantId: string, reference: string): number[] {
    // A resolution that named fewer references than its entry has leaves an alias behind: skip it.
    return listOf(this.byKey.get(keyOf(merchantId, reference))).filter((offset) => this.hashes.has(offset));
  }

  /**
   * Offsets of one webhook's unresolved failures: under one of its references when the caller knows
   * them (the delivery log does), else by a walk over the merchant's keys (rare: the log is off).
   * Matched by the webhook-id's hash; the resender checks the entries' real webhook-id.
   */
  lookupWebhook(merchantId: string, webhookId: string, references?: readonly string[]): { reference: string; offsets: number[] } | undefined {
    const hash = hashOf(webhookId);
    const prefix = keyOf(merchantId, '');
    const keys = references && references.length > 0 ? references.map((reference) => keyOf(merchantId, reference)) : this.byKey.keys();
    for (const key of keys) {
      if (!key.startsWith(prefix)) continue;
      const offsets = listOf(this.byKey.get(key)).filter((offset) => this.hashes.get(offset) === hash);
      if (offsets.length > 0) return { reference: key.slice(prefix.length), offsets };
    }
    return undefined;
  }

  /** A hash of the webhook-id of an unresolved entry: equal for every entry of one webhook. */
  webhookHashAt(offset: number): number | undefined {
    return this.hashes.get(offset);
  }

  /**
   * Resolves with the offsets this claim won once the stream brings it back to this replica; every
   * other replica reaches the same verdict from the same order.
   */
  awaitClaim(claimId: string, timeoutMs: number): Promise<number[]> {
    return this.claimWaiters.expect(claimId, timeoutMs, `claim ${claimId} from ${this.stream}`);
  }

  forgetClaim(claimId: string): void {
    this.claimWaiters.forget(claimId);
  }

  /** Resolves once this replica has read back the release of a claim (its entries are free here). */
  awaitRelease(claimId: string, timeoutMs: number): Promise<number[]> {
    return this.claimWaiters.expect(releaseKey(claimId), timeoutMs, `release of claim ${claimId} from ${this.stream}`);
  }

  forgetRelease(claimId: string): void {
    this.claimWaiters.forget(releaseKey(claimId));
  }

  /** The claim holding an unresolved entry and its lease left on this replica's clock; undefined when free. */
  holdOf(offset: number): Hold | undefined {
    const held = this.claims.get(offset);
    if (!held || !this.hashes.has(offset)) return undefined;
    return { claimId: held.id, remainingMs: Math.max(0, this.claimLeaseMs - (this.monotonic() - held.seenAt)) };
  }

  /**
   * Applies a resolution at once on this instance; the stream brings it to the others. An item
   * naming a webhook resolves the entry at its offset only if it is of that webhook: one written
   * for an entry of a deleted stream (a resent copy the dispatcher handled after the deletion)
   * must not resolve another webhook that now sits at that offset.
   */
  resolve(resolution: Resolution): void {
    for (const { offset, references, webhookId } of resolution.resolved) {
      const hash = this.hashes.get(offset);
      if (webhookId !== undefined && hash !== undefined && hash !== hashOf(webhookId)) continue;
      this.removeFailure(offset, references.map((reference) => keyOf(resolution.merchantId, reference)));
    }
  }

  /** The stream was deleted: its entries and claims are gone with it (they cannot be read to resend). */
  private reset(): void {
    this.byKey.clear();
    this.hashes.clear();
    this.claims.clear();
    this.duplicates = 0;
    this.options.spool?.clear();
  }

  /** Retention removes whole segments from the stream's head: drop what is now before its first offset. */
  private async dropExpired(): Promise<void> {
    if (!this.ready || this.hashes.size === 0) return;
    let first: number | undefined;
    try {
      first = await firstOffset(this.broker, this.stream);
    } catch {
      return; // tried again at the next check
    }
    const oldest = this.hashes.keys().next().value;
    if (first !== undefined) this.options.spool?.forgetBefore(first);
    if (first === undefined || oldest === undefined || oldest >= first) return;
    const before = this.hashes.size;
    // Rare (once per expired segment) and bounded by the number of keys: scanning them all keeps
    // the index free of a per-entry record of its keys.
    for (const [key, value] of [...this.byKey]) {
      for (const offset of listOf(value).filter((o) => o < first)) this.removeFailure(offset, [key]);
    }
    this.logger.info('failed entries expired by retention', { dropped: before - this.hashes.size, firstOffset: first });
  }

  private apply(message: ConsumeMessage, offset: number): void {
    const headers = message.properties.headers;
    switch (entryTypeOf(headers)) {
      case ENTRY_TYPES.failure: {
        const keys = failureKeysOf(headers);
        if (!keys) return;
        const hash = hashOf(webhookIdOf(message) ?? `offset:${offset}`);
        this.options.spool?.put(offset, message);
        this.addFailure(offset, [...new Set(keys.references)].map((reference) => keyOf(keys.merchantId, reference)), hash);
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
      default:
        return;
    }
  }

  /**
   * First claim wins. A held entry goes to a later claim only if that claim names the holder in
   * `takesOver`: its claimant saw the lease run out on its own clock. The verdict depends on the
   * stream alone, so every replica reaches the same one whatever its clock or its lag.
   *
   * The lease of a claim counts from when this replica read it, also in a replay at start-up: a
   * replica that just started holds every claim it replays for a whole lease before it offers to
   * take one over. That is conservative: it may wait up to one lease longer than the claimant's
   * own peers, never less.
   */
  private applyClaim(claim: Claim): void {
    const won: number[] = [];
    const takesOver = new Set(claim.takesOver ?? []);
    const seenAt = this.monotonic();
    // Only the claimant's merchant's entries for that reference can be won.
    const own = claim.reference === undefined ? undefined : new Set(listOf(this.byKey.get(keyOf(claim.merchantId, claim.reference))));
    for (const offset of claim.offsets) {
      if (!this.hashes.has(offset) || (own && !own.has(offset))) continue;
      const held = this.claims.get(offset);
      if (claim.release) {
        if (held?.id === claim.claimId) this.claims.delete(offset);
        continue;
      }
      if (held && !takesOver.has(held.id)) continue;
      this.claims.set(offset, { id: claim.claimId, seenAt });
      won.push(offset);
    }
    this.claimWaiters.settle(claim.release ? releaseKey(claim.claimId) : claim.claimId, won);
  }

  private addFailure(offset: number, keys: string[], hash: number): void {
    if (this.hashes.has(offset) || keys.length === 0) return;
    if (listOf(this.byKey.get(keys[0]!)).some((other) => this.hashes.get(other) === hash)) this.duplicates++;
    this.hashes.set(offset, hash);
    for (const key of keys) addTo(this.byKey, key, offset);
  }

  /** Removes an entry from these keys; the first call for an entry also forgets it. */
  private removeFailure(offset: number, keys: string[]): void {
    const hash = this.hashes.get(offset);
    for (const key of keys) removeFrom(this.byKey, key, offset);
    if (hash === undefined) return;
    this.hashes.delete(offset);
    this.claims.delete(offset);
    // Every entry of one webhook has the same keys: a twin left under one of them was its duplicate.
    if (keys.some((key) => listOf(this.byKey.get(key)).some((other) => this.hashes.get(other) === hash))) this.duplicates--;
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

function releaseKey(claimId: string): string {
  return `release:${claimId}`;
}

function keyOf(merchantId: string, reference: string): string {
  return `${merchantId}\u0000${reference}`;
}

/** FNV-1a, 31 bits: a small integer V8 stores without boxing. */
function hashOf(text: string): number {
  let hash = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    hash ^= text.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193);
  }
  return hash & 0x7fffffff;
}
