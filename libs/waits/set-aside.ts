import { BoundedMap } from '../runtime/bounded-map.js';
import { type Key as SetAsideKey, keyOf } from './circuits.js';
import type { WaitKey } from './store.js';

export const WAIT_SET_ASIDE_MS = 60_000;
/** Past it the oldest is tried again sooner (its refusal costs a split pick). */
export const MAX_SET_ASIDE = 1_000;

/** Keys whose pick, probe or unpark PostgreSQL refused alone: spares each pick the split finding it again. */
export class SetAsideWaits<K extends SetAsideKey = WaitKey> {
  private readonly until = new BoundedMap<string, { key: K; until: number }>(MAX_SET_ASIDE);

  constructor(private readonly now: () => number = Date.now) {}

  add(key: K): void {
    this.until.set(keyOf(key), { key, until: this.now() + WAIT_SET_ASIDE_MS });
  }

  /** The keys still set aside (those whose time is over are forgotten). */
  keys(): K[] {
    const now = this.now();
    const keys: K[] = [];
    for (const [id, entry] of this.until) {
      if (entry.until > now) keys.push(entry.key);
      else this.until.delete(id);
    }
    return keys;
  }

  get size(): number {
    return this.until.size;
  }
}
