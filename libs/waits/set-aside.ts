import { BoundedMap } from '../runtime/bounded-map.js';
import type { Key as SetAsideKey } from './circuits.js';
import type { WaitKey } from './store.js';

/** How long a wait whose pick PostgreSQL refused is left out of this dispatcher's picks before it is tried again. */
export const WAIT_SET_ASIDE_MS = 60_000;
/** The waits set aside at most; past it the oldest is tried again sooner (its refusal costs a split pick). */
export const MAX_SET_ASIDE = 1_000;

/**
 * The waits whose pick PostgreSQL refused alone (a trigger, a constraint): left in their rows,
 * bytes and all, and out of this dispatcher's picks for WAIT_SET_ASIDE_MS, then tried again (a
 * mended rule lets them go on). Not a copy of the wait: the row decides; this only spares each pick
 * the split that would find the same refusal again. Likewise circuits (no webhook) whose probe or
 * unpark PostgreSQL refused for one of their parked waits.
 */
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

function keyOf(key: SetAsideKey): string {
  return `${key.merchantId}\u001f${key.webhookId ?? ''}\u001f${key.endpointId ?? ''}`;
}
