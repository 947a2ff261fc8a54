import { type Health, withHealth } from './health.js';
import { idDigest, TOMBSTONE_KEEP_MS } from './rows.js';
import type { Merchant } from './schema.js';

interface Entry {
  /** As the row holds it (no clock). */
  merchant: Merchant;
  version: number;
  /** What byId answers: the merchant with its endpoint's clock. */
  served: Merchant;
}

/**
 * What a program holds of the directory: merchants by id and by public key, each at a version that
 * only goes forward, the endpoints' failing clocks, and the merchants whose newest row it could not read.
 */
export class DirectoryCache {
  private readonly byIdMap = new Map<string, Entry>();
  private readonly byKeyMap = new Map<string, string>();
  /** Merchant → its endpoints' running clocks, by endpoint id. */
  private readonly health = new Map<string, Map<string, Health>>();
  /** Merchant → the key id of the row it could not open, with its version. */
  readonly unreadable = new Map<string, { version: number; keyId: string | undefined }>();
  /**
   * The digests of deleted merchants' ids (their tombstones), with when each was deleted (ms): what
   * tells a deleted merchant from one never known, for a tombstone's day.
   */
  private readonly buried = new Map<string, number>();

  get size(): number {
    return this.byIdMap.size;
  }

  byId(id: string): Merchant | undefined {
    return this.byIdMap.get(id)?.served;
  }

  byPublicKey(publicKey: string): Merchant | undefined {
    const id = this.byKeyMap.get(publicKey);
    return id === undefined ? undefined : this.byId(id);
  }

  versionOf(id: string): number | undefined {
    return this.byIdMap.get(id)?.version;
  }

  list(): Merchant[] {
    return [...this.byIdMap.values()].map((entry) => entry.served).sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  }

  /** Holds `merchant` at `version` unless a version as new is held; returns whether it did. */
  apply(merchant: Merchant, version: number): boolean {
    const held = this.byIdMap.get(merchant.id);
    if (held && held.version >= version) return false;
    if (held && held.merchant.publicKey !== merchant.publicKey && this.byKeyMap.get(held.merchant.publicKey) === merchant.id) {
      this.byKeyMap.delete(held.merchant.publicKey);
    }
    const bare = withHealth(merchant);
    this.byIdMap.set(merchant.id, { merchant: bare, version, served: withHealth(bare, this.health.get(merchant.id)?.values()) });
    this.byKeyMap.set(merchant.publicKey, merchant.id);
    const unread = this.unreadable.get(merchant.id);
    if (unread && unread.version <= version) this.unreadable.delete(merchant.id);
    return true;
  }

  /** A newer row this program cannot open: the held copy stays, and the merchant is reported. */
  markUnreadable(id: string, version: number, keyId: string | undefined): boolean {
    if ((this.byIdMap.get(id)?.version ?? 0) >= version) return false;
    this.unreadable.set(id, { version, keyId });
    return true;
  }

  /** A tombstone at `version`: forgets the merchant held at that version or below; returns whether it did. */
  drop(id: string, version: number): boolean {
    const held = this.byIdMap.get(id);
    if (!held || held.version > version) return false;
    this.byIdMap.delete(id);
    if (this.byKeyMap.get(held.merchant.publicKey) === id) this.byKeyMap.delete(held.merchant.publicKey);
    this.health.delete(id);
    this.unreadable.delete(id);
    return true;
  }

  /** A tombstone read (at load or since): the merchant it names, when not held, is deleted for a day from `deletedAt` (ms). */
  bury(digest: string, deletedAt: number): void {
    this.buried.set(digest, deletedAt);
  }

  /**
   * Forgets the tombstones past their day, as a program started now would not read them: a running
   * program holds about a day's deletes, not every one since it started (called with new tombstones).
   * `now`: PostgreSQL's time, which stamped them (the directory's clock).
   */
  forgetExpired(now: number): void {
    const oldest = now - TOMBSTONE_KEEP_MS;
    for (const [digest, at] of this.buried) if (at <= oldest) this.buried.delete(digest);
  }

  /**
   * Whether `id` is a deleted merchant: not held, and a tombstone of the last day names it (digested
   * only for an id not held: rare), by `now()`: PostgreSQL's time, which stamped it.
   */
  deleted(id: string, now: () => number): boolean {
    if (this.buried.size === 0 || this.byIdMap.has(id)) return false;
    return (this.buried.get(idDigest(id)) ?? 0) > now() - TOMBSTONE_KEEP_MS;
  }

  /** The ids held, by the digest a tombstone keeps (computed when tombstones come: deletes are rare). */
  digests(): Map<string, string> {
    const found = new Map<string, string>();
    for (const id of this.byIdMap.keys()) found.set(idDigest(id), id);
    return found;
  }

  /** The clock of one of the merchant's endpoints (undefined: cleared). */
  setHealth(merchantId: string, endpointId: string, health: Health | undefined): void {
    let clocks = this.health.get(merchantId);
    if (health) {
      if (!clocks) this.health.set(merchantId, (clocks = new Map()));
      clocks.set(endpointId, { ...health, endpointId });
    } else if (clocks) {
      clocks.delete(endpointId);
      if (clocks.size === 0) this.health.delete(merchantId);
    }
    const held = this.byIdMap.get(merchantId);
    if (held) held.served = withHealth(held.merchant, this.health.get(merchantId)?.values());
  }

  /** Takes over what an older cache holds that this one lacks a readable version of (a full load that met an unreadable row). */
  keepFrom(older: DirectoryCache, id: string): void {
    const held = older.byIdMap.get(id);
    if (held && !this.byIdMap.has(id)) this.apply(held.merchant, held.version);
  }
}
