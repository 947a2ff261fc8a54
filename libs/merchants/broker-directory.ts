import { randomUUID } from 'node:crypto';
import type { ConsumeMessage } from 'amqplib';
import { type BrokerConnection, BrokerUnavailableError } from '../broker/index.js';
import { HEADERS } from '../contracts/index.js';
import type { Logger } from '../logger/index.js';
import { ReadBacks, StreamTail } from '../streams/index.js';
import type { MerchantDirectory } from './directory.js';
import type { Merchant } from './schema.js';
import {
  appendSettingsEntry,
  appendSyncEntry,
  decodeSettingsEntry,
  type IdempotencyRecord,
  SETTINGS_ENTRY_TYPE,
  type SettingsEntry,
  SYNC_ENTRY_TYPE,
} from './settings-entries.js';

export interface BrokerDirectoryOptions {
  /** A merchant whose latest entry is older than this is written again (a refresh), so that retention never removes it. */
  refreshAfterMs?: number;
  /** How often merchants due for a refresh are looked for. */
  refreshCheckMs?: number;
  /** A write not read back within this fails (BrokerUnavailableError). */
  writeTimeoutMs?: number;
  now?: () => Date;
}

/** The directory has not caught up with the merchants stream yet: it cannot answer for what it has not read. */
export class DirectoryNotReadyError extends Error {
  constructor() {
    super('the merchant directory is still reading the merchants stream');
    this.name = 'DirectoryNotReadyError';
  }
}

/** Kept per merchant: its settings and the entry that set them. */
interface Current {
  merchant: Merchant;
  version: number;
  entryId: string;
  writtenAt: number;
}

/** What a change function returns: the new settings, or undefined to leave the merchant as it is. */
export type SettingsChange = (current: Merchant | undefined) => Merchant | undefined;

/** How long an Idempotency-Key's result is answered again (Stripe's window). */
export const IDEMPOTENCY_WINDOW_MS = 24 * 3_600_000;

/** A write made under an Idempotency-Key: `result` is computed after the change, for the entry. */
export interface IdempotentWrite {
  key: string;
  fingerprint: string;
  result: (next: Merchant, current: Merchant | undefined) => unknown;
}

/** The Idempotency-Key was used, within its window, for a different request. */
export class IdempotencyKeyReusedError extends Error {
  constructor() {
    super('this Idempotency-Key was used for a different request');
    this.name = 'IdempotencyKeyReusedError';
  }
}

/**
 * Merchants and their webhook settings from the `merchants` stream, which the admin API and the CLI
 * write. Every program tails it from the first offset and follows it live, so a change reaches
 * every replica as soon as the broker delivers it; it is ready once it has read back a checkpoint
 * it appended after connecting. The latest version of each merchant wins (see SettingsEntry).
 */
export class BrokerMerchantDirectory implements MerchantDirectory {
  private readonly byIdMap = new Map<string, Current>();
  private readonly byKeyMap = new Map<string, string>();
  /** Idempotency-Key → the result of the write it made, while within IDEMPOTENCY_WINDOW_MS. */
  private readonly results = new Map<string, { fingerprint: string; result: unknown; until: number }>();
  private resultsSweptAt = 0;
  /** Settled with whether the entry was applied: read back in stream order, that is the verdict. */
  private readonly writeWaiters = new ReadBacks<boolean>(() => void this.tail?.verifyLive());
  private readonly tail: StreamTail;
  private caughtUpOnce = false;
  private refreshTimer?: NodeJS.Timeout;
  private stopped = false;
  private readonly now: () => Date;

  constructor(
    private readonly broker: BrokerConnection,
    private readonly stream: string,
    private readonly logger: Logger,
    private readonly options: BrokerDirectoryOptions = {},
  ) {
    this.now = options.now ?? (() => new Date());
    this.tail = new StreamTail(broker, stream, logger, {
      prefetch: 1_000,
      onEntry: (message, offset) => this.apply(message, offset),
      // The stream was deleted: the merchants are what the new stream says, from its first entry.
      onReset: () => {
        this.byIdMap.clear();
        this.byKeyMap.clear();
      },
      onCaughtUp: (offset) => {
        this.caughtUpOnce = true;
        this.logger.info('merchant directory caught up', { merchants: this.byIdMap.size, offset });
      },
    });
  }

  get ready(): boolean {
    return this.tail.ready;
  }

  get size(): number {
    return this.byIdMap.size;
  }

  async start(): Promise<void> {
    await this.tail.start();
    this.refreshTimer = setInterval(() => void this.refresh(), this.options.refreshCheckMs ?? 3_600_000);
    this.refreshTimer.unref();
  }

  /** Resolves once caught up with the stream; a program waits for it before it acts on merchants. */
  waitUntilReady(timeoutMs: number): Promise<void> {
    return this.tail.waitUntilCaughtUp(timeoutMs);
  }

  async close(): Promise<void> {
    this.stopped = true;
    clearInterval(this.refreshTimer);
    await this.tail.stop();
  }

  byId(id: string): Merchant | undefined {
    return this.byIdMap.get(id)?.merchant;
  }

  byPublicKey(publicKey: string): Merchant | undefined {
    const id = this.byKeyMap.get(publicKey);
    return id === undefined ? undefined : this.byId(id);
  }

  list(): Merchant[] {
    return [...this.byIdMap.values()].map((current) => current.merchant).sort((a, b) => a.id.localeCompare(b.id));
  }

  /**
   * Applies `change` to the merchant's current settings and writes the result as the next version.
   * If another writer got that version first, the change is applied again to what it wrote: no
   * write is lost, none is applied twice. Resolves with the settings that won.
   */
  async update(merchantId: string, change: SettingsChange): Promise<{ merchant: Merchant; created: boolean; changed: boolean }> {
    const { merchant, created, changed } = await this.write(merchantId, change);
    return { merchant, created, changed };
  }

  /**
   * Like update, under an Idempotency-Key: the entry that makes the change also records the key
   * and its result, so a repeat of the key on any replica, after any restart, within 24 h gets
   * that result back (`replayed`) and changes nothing. Two writes racing with one key: the first
   * entry wins the version, the other sees its record when it tries again.
   */
  async updateOnce(merchantId: string, change: SettingsChange, write: IdempotentWrite): Promise<{ result: unknown; replayed: boolean }> {
    const { result, replayed } = await this.write(merchantId, change, write);
    return { result, replayed: replayed ?? false };
  }

  /** The recorded result of an Idempotency-Key, or undefined; throws when it was for another request. */
  private recorded(write: IdempotentWrite): { result: unknown } | undefined {
    const found = this.results.get(write.key);
    if (!found || found.until <= this.now().getTime()) return undefined;
    if (found.fingerprint !== write.fingerprint) throw new IdempotencyKeyReusedError();
    return { result: found.result };
  }

  private async write(
    merchantId: string,
    change: SettingsChange,
    idempotent?: IdempotentWrite,
  ): Promise<{ merchant: Merchant; created: boolean; changed: boolean; result?: unknown; replayed?: boolean }> {
    let synced = false;
    for (let attempt = 0; attempt < 5; attempt++) {
      if (!this.ready) throw new DirectoryNotReadyError();
      const current = this.byIdMap.get(merchantId);
      const replay = idempotent && this.recorded(idempotent);
      // The fingerprint names the merchant, so a recorded result was this merchant's write.
      if (replay && current) return { merchant: current.merchant, created: false, changed: false, result: replay.result, replayed: true };
      let next: Merchant | undefined;
      try {
        next = change(current?.merchant);
      } catch (err) {
        // A refusal (no such merchant, key taken, …) may come from what this replica has not read
        // yet: a merchant created on another replica a moment ago. Read up to now and ask again.
        if (synced) throw err;
        await this.sync();
        synced = true;
        attempt--;
        continue;
      }
      if (next === undefined) {
        if (!current) throw new Error(`no settings for merchant ${merchantId}`);
        return { merchant: current.merchant, created: false, changed: false };
      }
      const record: IdempotencyRecord | undefined = idempotent && {
        key: idempotent.key,
        fingerprint: idempotent.fingerprint,
        result: idempotent.result(next, current?.merchant),
      };
      const entry: SettingsEntry = {
        merchantId,
        version: (current?.version ?? 0) + 1,
        entryId: randomUUID(),
        writtenAt: this.now().toISOString(),
        kind: 'change',
        merchant: next,
        ...(record ? { idempotency: record } : {}),
      };
      // The verdict comes from the read-back, not from what the directory holds once this resumes:
      // the tail may already have applied another replica's next version on top of this entry, and
      // taking that for a lost race would apply the change a second time (a rotation twice).
      if (await this.append(entry)) {
        this.logger.info('merchant settings written', { merchantId, version: entry.version });
        return { merchant: next, created: current === undefined, changed: true, result: record?.result, replayed: false };
      }
      // Another writer took this version first, or the entry was refused (a public key another
      // merchant took first): apply the change again to what the stream holds now.
    }
    throw new BrokerUnavailableError(`merchant ${merchantId} kept changing under five writes in a row`);
  }

  /** Resolves once this directory has read everything appended to the stream before now. */
  private async sync(): Promise<void> {
    const timeoutMs = this.options.writeTimeoutMs ?? 10_000;
    const syncId = randomUUID();
    const readBack = this.writeWaiters.expect(syncId, timeoutMs, `a sync marker from ${this.stream}`);
    readBack.catch(() => {});
    try {
      await appendSyncEntry(this.broker, this.stream, syncId, timeoutMs);
    } catch (err) {
      this.writeWaiters.forget(syncId);
      throw err;
    }
    await readBack;
  }

  /** Appends the entry and waits until this directory has read it back: true when it was applied. */
  private async append(entry: SettingsEntry): Promise<boolean> {
    const timeoutMs = this.options.writeTimeoutMs ?? 10_000;
    const readBack = this.writeWaiters.expect(entry.entryId, timeoutMs, `merchant settings from ${this.stream}`);
    // The read-back may time out while the append still waits for its confirm: that rejection is
    // awaited below, and must not count as unhandled meanwhile (Node would end the process).
    readBack.catch(() => {});
    try {
      await appendSettingsEntry(this.broker, this.stream, entry, timeoutMs);
    } catch (err) {
      this.writeWaiters.forget(entry.entryId);
      throw err;
    }
    return readBack;
  }

  private apply(message: ConsumeMessage, offset: number): void {
    const headers = message.properties.headers;
    if (headers?.[HEADERS.entryType] === SYNC_ENTRY_TYPE) return this.writeWaiters.settle(String(headers['x-sync-id']), true);
    if (headers?.[HEADERS.entryType] !== SETTINGS_ENTRY_TYPE) return;
    const entry = decodeSettingsEntry(message.content);
    if (entry) this.applyEntry(entry);
    else this.logger.warn('merchants stream entry skipped: not valid settings', { offset });
  }

  private applyEntry(entry: SettingsEntry): void {
    const current = this.byIdMap.get(entry.merchantId);
    const writtenAt = Date.parse(entry.writtenAt) || 0;
    if (current && entry.version < current.version) return this.settleWrite(entry, false);
    if (current && entry.version === current.version) {
      // A refresh of these settings, or a writer that lost the race for this version.
      if (entry.kind === 'refresh' && entry.entryId === current.entryId) current.writtenAt = Math.max(current.writtenAt, writtenAt);
      return this.settleWrite(entry, false);
    }
    const owner = this.byKeyMap.get(entry.merchant.publicKey);
    if (entry.kind === 'change' && owner !== undefined && owner !== entry.merchantId) {
      // Two writers gave one public key to two merchants: the first entry in the stream keeps it,
      // and every reader refuses the second alike, so no replica ever sees both.
      this.logger.warn('merchant settings entry refused: another merchant has its public key', { merchantId: entry.merchantId, owner, version: entry.version });
      return this.settleWrite(entry, false);
    }
    if (current && current.merchant.publicKey !== entry.merchant.publicKey && this.byKeyMap.get(current.merchant.publicKey) === entry.merchantId) {
      this.byKeyMap.delete(current.merchant.publicKey);
    }
    this.byIdMap.set(entry.merchantId, { merchant: entry.merchant, version: entry.version, entryId: entry.entryId, writtenAt });
    this.byKeyMap.set(entry.merchant.publicKey, entry.merchantId);
    if (entry.idempotency) this.remember(entry.idempotency, writtenAt);
    if (this.caughtUpOnce) this.logger.info('merchant settings applied', { merchantId: entry.merchantId, version: entry.version });
    this.settleWrite(entry, true);
  }

  private remember(record: IdempotencyRecord, writtenAt: number): void {
    const now = this.now().getTime();
    const until = writtenAt + IDEMPOTENCY_WINDOW_MS;
    const kept = this.results.get(record.key);
    if (until <= now || (kept && kept.until > now)) return;
    this.results.set(record.key, { fingerprint: record.fingerprint, result: record.result, until });
    // Results kept at most a day: sweep the expired ones now and then, not on every write.
    if (now - this.resultsSweptAt > 60_000) {
      this.resultsSweptAt = now;
      for (const [key, kept] of this.results) if (kept.until <= now) this.results.delete(key);
    }
  }

  private settleWrite(entry: SettingsEntry, applied: boolean): void {
    this.writeWaiters.settle(entry.entryId, applied);
  }

  /**
   * Writes again, unchanged, the settings of merchants whose latest entry is older than
   * `refreshAfterMs`, so that the stream's retention (which removes old segments) always finds a
   * newer copy of every merchant. Every replica may do it; the copies are harmless.
   */
  async refresh(): Promise<number> {
    if (this.stopped || !this.ready) return 0;
    const horizon = this.now().getTime() - (this.options.refreshAfterMs ?? 30 * 86_400_000);
    let refreshed = 0;
    for (const [merchantId, current] of this.byIdMap) {
      if (current.writtenAt > horizon) continue;
      const entry: SettingsEntry = {
        merchantId,
        version: current.version,
        entryId: current.entryId,
        writtenAt: this.now().toISOString(),
        kind: 'refresh',
        merchant: current.merchant,
      };
      try {
        await appendSettingsEntry(this.broker, this.stream, entry, this.options.writeTimeoutMs ?? 10_000);
        current.writtenAt = Date.parse(entry.writtenAt);
        refreshed++;
      } catch (err) {
        this.logger.warn('merchant settings refresh not written; tried again at the next check', { merchantId, error: (err as Error).message });
        return refreshed;
      }
    }
    if (refreshed > 0) this.logger.info('merchant settings refreshed ahead of retention', { refreshed });
    return refreshed;
  }
}
