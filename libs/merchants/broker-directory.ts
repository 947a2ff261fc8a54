import { randomUUID } from 'node:crypto';
import type { ConsumeMessage } from 'amqplib';
import { type BrokerConnection, BrokerUnavailableError } from '../broker/index.js';
import { HEADERS } from '../contracts/index.js';
import type { Logger } from '../logger/index.js';
import { ReadBacks, StreamTail } from '../streams/index.js';
import type { MerchantDirectory } from './directory.js';
import type { Merchant } from './schema.js';
import { appendSettingsEntry, decodeSettingsEntry, SETTINGS_ENTRY_TYPE, type SettingsEntry } from './settings-entries.js';

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

/**
 * Merchants and their webhook settings from the `merchants` stream, which the admin API and the CLI
 * write. Every program tails it from the first offset and follows it live, so a change reaches
 * every replica as soon as the broker delivers it; it is ready once it has read back a checkpoint
 * it appended after connecting. The latest version of each merchant wins (see SettingsEntry).
 */
export class BrokerMerchantDirectory implements MerchantDirectory {
  private readonly byIdMap = new Map<string, Current>();
  private readonly byKeyMap = new Map<string, string>();
  private readonly writeWaiters = new ReadBacks<void>();
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
    for (let attempt = 0; attempt < 5; attempt++) {
      if (!this.ready) throw new DirectoryNotReadyError();
      const current = this.byIdMap.get(merchantId);
      const next = change(current?.merchant);
      if (next === undefined) {
        if (!current) throw new Error(`no settings for merchant ${merchantId}`);
        return { merchant: current.merchant, created: false, changed: false };
      }
      const entry: SettingsEntry = {
        merchantId,
        version: (current?.version ?? 0) + 1,
        entryId: randomUUID(),
        writtenAt: this.now().toISOString(),
        kind: 'change',
        merchant: next,
      };
      await this.write(entry);
      const now = this.byIdMap.get(merchantId);
      if (now?.entryId === entry.entryId) {
        this.logger.info('merchant settings written', { merchantId, version: entry.version });
        return { merchant: now.merchant, created: current === undefined, changed: true };
      }
      // Another writer took this version first: apply the change again to what it wrote.
    }
    throw new BrokerUnavailableError(`merchant ${merchantId} kept changing under five writes in a row`);
  }

  /** Appends the entry and waits until this directory has read it back. */
  private async write(entry: SettingsEntry): Promise<void> {
    const timeoutMs = this.options.writeTimeoutMs ?? 10_000;
    const readBack = this.writeWaiters.expect(entry.entryId, timeoutMs, `merchant settings from ${this.stream}`);
    try {
      await appendSettingsEntry(this.broker, this.stream, entry, timeoutMs);
    } catch (err) {
      this.writeWaiters.forget(entry.entryId);
      throw err;
    }
    await readBack;
  }

  private apply(message: ConsumeMessage, offset: number): void {
    if (message.properties.headers?.[HEADERS.entryType] !== SETTINGS_ENTRY_TYPE) return;
    const entry = decodeSettingsEntry(message.content);
    if (entry) this.applyEntry(entry);
    else this.logger.warn('merchants stream entry skipped: not valid settings', { offset });
  }

  private applyEntry(entry: SettingsEntry): void {
    const current = this.byIdMap.get(entry.merchantId);
    const writtenAt = Date.parse(entry.writtenAt) || 0;
    if (current && entry.version < current.version) return this.settleWrite(entry);
    if (current && entry.version === current.version) {
      // A refresh of these settings, or a writer that lost the race for this version.
      if (entry.kind === 'refresh' && entry.entryId === current.entryId) current.writtenAt = Math.max(current.writtenAt, writtenAt);
      return this.settleWrite(entry);
    }
    if (current && current.merchant.publicKey !== entry.merchant.publicKey && this.byKeyMap.get(current.merchant.publicKey) === entry.merchantId) {
      this.byKeyMap.delete(current.merchant.publicKey);
    }
    this.byIdMap.set(entry.merchantId, { merchant: entry.merchant, version: entry.version, entryId: entry.entryId, writtenAt });
    this.byKeyMap.set(entry.merchant.publicKey, entry.merchantId);
    if (this.caughtUpOnce) this.logger.info('merchant settings applied', { merchantId: entry.merchantId, version: entry.version });
    this.settleWrite(entry);
  }

  private settleWrite(entry: SettingsEntry): void {
    this.writeWaiters.settle(entry.entryId, undefined);
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
