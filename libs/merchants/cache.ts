import { type Health, withHealth } from './health.js';
import { idDigest, TOMBSTONE_KEEP_MS } from './rows.js';
import type { Merchant } from './schema.js';

interface Entry {
  /** As the row holds it (no clock). */
  merchant: Merchant;
  version: number;
  /** With its endpoints' clocks. */
  served: Merchant;
}

/**
 * Merchants by id and public key, each at a version that only goes forward, and their endpoints' failing clocks.
 * All it holds is its own maps: PgMerchantDirectory (one) takes over a loaded one's at once.
 */
export class DirectoryCache {
  private byIdMap = new Map<string, Entry>();
  private byKeyMap = new Map<string, string>();
  /** Merchant → endpoint → running clock. */
  private health = new Map<string, Map<string, Health>>();
  /** Merchant → the row it could not open. */
  protected unread = new Map<string, { version: number; keyId: string | undefined }>();
  /** Tombstones' digests, with when each was deleted (ms): a deleted merchant is not one never known. */
  private buried = new Map<string, number>();

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
    const unread = this.unread.get(merchant.id);
    if (unread && unread.version <= version) this.unread.delete(merchant.id);
    return true;
  }

  /** A newer row this program cannot open: the held copy stays. */
  markUnreadable(id: string, version: number, keyId: string | undefined): boolean {
    if ((this.byIdMap.get(id)?.version ?? 0) >= version) return false;
    this.unread.set(id, { version, keyId });
    return true;
  }

  /** A tombstone at `version`: forgets the merchant held at that version or below; returns whether it did. */
  drop(id: string, version: number): boolean {
    const held = this.byIdMap.get(id);
    if (!held || held.version > version) return false;
    this.byIdMap.delete(id);
    if (this.byKeyMap.get(held.merchant.publicKey) === id) this.byKeyMap.delete(held.merchant.publicKey);
    this.health.delete(id);
    this.unread.delete(id);
    return true;
  }

  /** The merchant it names, when not held, is deleted for a day from `deletedAt` (ms). */
  bury(digest: string, deletedAt: number): void {
    this.buried.set(digest, deletedAt);
  }

  /** Forgets the tombstones past their day, as a program started now would not read them; `now`: PostgreSQL's. */
  forgetExpired(now: number): void {
    const oldest = now - TOMBSTONE_KEEP_MS;
    for (const [digest, at] of this.buried) if (at <= oldest) this.buried.delete(digest);
  }

  /** Not held, and a tombstone of the last day (by PostgreSQL's `now()`) names it. */
  deleted(id: string, now: () => number): boolean {
    if (this.buried.size === 0 || this.byIdMap.has(id)) return false;
    return (this.buried.get(idDigest(id)) ?? 0) > now() - TOMBSTONE_KEEP_MS;
  }

  /** The ids held, by the digest a tombstone keeps. */
  digests(): Map<string, string> {
    const found = new Map<string, string>();
    for (const id of this.byIdMap.keys()) found.set(idDigest(id), id);
    return found;
  }

  /** undefined: cleared. */
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

  /** Takes over an older cache's version of `id`, unless this one holds one as new (apply's rule). */
  keepFrom(older: DirectoryCache, id: string): void {
    const held = older.byIdMap.get(id);
    if (held) this.apply(held.merchant, held.version);
  }
}
