import { isIP } from 'node:net';
import type { Queryable } from '../../libs/delivery-store/index.js';
import { isUnavailable, MerchantStoreUnavailableError } from '../../libs/merchants/index.js';
import { BoundedMap, NamedError } from '../../libs/runtime/index.js';
import { returnCell, sweepCells, takeCell } from '../../libs/rate-limit/index.js';
import { rateLimited } from './errors.js';

export type Allowance = { ok: true } | { ok: false; retryAfterSeconds: number };

/** `burst` requests at once per key, refilled at `perMinute`. */
export interface RateLimiter {
  take(key: string): Promise<Allowance>;
}

/** Gives back a granted take for what was then refused: a limit on changes counts those made. */
export interface ReturningLimiter extends RateLimiter {
  giveBack(key: string): Promise<void>;
}

export async function take(limiter: RateLimiter, key: string, what?: string): Promise<void> {
  const allowed = await limiter.take(key);
  if (!allowed.ok) throw rateLimited(allowed.retryAfterSeconds, what);
}

/** In memory: for this instance's own resources (its log-read pool). */
export class MemoryRateLimiter implements RateLimiter {
  private readonly buckets = new BoundedMap<string, { tokens: number; at: number }>(100_000);

  constructor(
    private readonly perMinute: number,
    private readonly burst: number,
    private readonly now: () => number = Date.now,
  ) {}

  async take(key: string): Promise<Allowance> {
    const now = this.now();
    const ratePerMs = this.perMinute / 60_000;
    const bucket = this.buckets.get(key) ?? { tokens: this.burst, at: now };
    bucket.tokens = Math.min(this.burst, bucket.tokens + (now - bucket.at) * ratePerMs);
    bucket.at = now;
    this.buckets.set(key, bucket);
    if (bucket.tokens >= 1) {
      bucket.tokens -= 1;
      return { ok: true };
    }
    return { ok: false, retryAfterSeconds: Math.max(1, Math.ceil((1 - bucket.tokens) / ratePerMs / 1000)) };
  }
}

/** In PostgreSQL (libs/rate-limit's GCRA), so that every API replica counts against one limit. */
export class SharedRateLimiter implements ReturningLimiter {
  private takes = 0;
  private readonly intervalMs: number;

  constructor(
    private readonly db: Queryable,
    /** Names the limit, so that one key (a merchant id) has a row per limit. */
    private readonly name: string,
    perMinute: number,
    private readonly burst: number,
  ) {
    this.intervalMs = 60_000 / perMinute;
  }

  async take(key: string): Promise<Allowance> {
    const id = `${this.name}:${key}`;
    try {
      const answer = await takeCell(this.db, id, { intervalMs: this.intervalMs, burstMs: this.burst * this.intervalMs });
      // Keys whose bucket is full again hold nothing worth keeping: swept now and then.
      if (++this.takes % 1_000 === 0) void sweepCells(this.db).catch(() => {});
      if (answer.ok) return { ok: true };
      return { ok: false, retryAfterSeconds: Math.max(1, Math.ceil(answer.retryInMs / 1000)) };
    } catch (err) {
      if (isUnavailable(err)) throw new MerchantStoreUnavailableError(err);
      throw err;
    }
  }

  async giveBack(key: string): Promise<void> {
    await returnCell(this.db, `${this.name}:${key}`, this.intervalMs);
  }
}

/** Refusals one replica remembers per limit (a key and a time each: under a megabyte). */
export const REMEMBERED_REFUSALS = 10_000;

/** Answers a refused key from memory until its Retry-After: a client over a shared limit costs no query meanwhile. */
export class RememberedRefusals implements RateLimiter {
  private readonly until = new BoundedMap<string, number>(REMEMBERED_REFUSALS);

  constructor(private readonly inner: RateLimiter, private readonly now: () => number = Date.now) {}

  refused(key: string): Allowance | undefined {
    const until = this.until.get(key);
    if (until === undefined) return undefined;
    const left = until - this.now();
    if (left <= 0) {
      this.until.delete(key);
      return undefined;
    }
    return { ok: false, retryAfterSeconds: Math.max(1, Math.ceil(left / 1000)) };
  }

  async take(key: string): Promise<Allowance> {
    const remembered = this.refused(key);
    if (remembered) return remembered;
    const allowed = await this.inner.take(key);
    if (!allowed.ok) this.until.set(key, this.now() + allowed.retryAfterSeconds * 1000);
    return allowed;
  }
}

/** The key of every client whose address is no IP address: one budget for all of them, never one per text. */
export const INVALID_ADDRESS_KEY = 'invalid';

/**
 * The address without the port some proxies append in X-Forwarded-For (`203.0.113.5:40001`,
 * `[2001:db8::1]:443`), which Express's req.ip keeps: keyed with it, each connection of one client
 * would be a bucket of its own, and an IPv4 one with a port would read as IPv6.
 */
function withoutPort(address: string): string {
  const bracketed = /^\[([^\]]*)\](?::\d{1,5})?$/.exec(address);
  if (bracketed) return isIP(bracketed[1]!) === 6 ? bracketed[1]! : '';
  return /^(\d{1,3}(?:\.\d{1,3}){3}):\d{1,5}$/.exec(address)?.[1] ?? address;
}

/** An IPv4 address as it is (an IPv4-mapped one too), an IPv6 one by its /64, usually one subscriber's. */
export function clientKey(given: string | undefined): string {
  if (!given) return 'unknown';
  const address = withoutPort(given.trim());
  const version = isIP(address);
  if (version === 0) return INVALID_ADDRESS_KEY;
  const mapped = /^::ffff:(\d{1,3}(?:\.\d{1,3}){3})$/i.exec(address);
  if (mapped) return mapped[1]!;
  if (version === 4) return address;
  const [head, tail] = address.split('::') as [string, string | undefined];
  const left = head === '' ? [] : head.split(':');
  const right = tail === undefined || tail === '' ? [] : tail.split(':');
  // An embedded IPv4 tail (::1.2.3.4) counts as two groups; only the first four groups matter here.
  const groups = tail === undefined ? left : [...left, ...Array(Math.max(0, 8 - left.length - right.length - right.filter((g) => g.includes('.')).length)).fill('0'), ...right];
  return `${groups.slice(0, 4).map((g) => (Number.parseInt(g, 16) || 0).toString(16)).join(':')}::/64`;
}

/** A read refused because its merchant already has as many in flight, and waiting, as allowed. */
export class TooManyInFlightError extends NamedError {
  constructor(readonly retryAfterSeconds: number) {
    super('too many queries in flight for this key');
  }
}

/**
 * At most `perKey` operations in flight per key (a merchant); the next `queue` wait in arrival order, each at
 * most `waitMs`; any more are refused. It keeps one merchant's heavy reads from filling this instance's pool.
 */
export class KeyedConcurrency {
  private readonly keys = new Map<string, { running: number; waiting: Array<() => void> }>();

  constructor(private readonly perKey: number, private readonly queue: number, private readonly waitMs: number) {}

  async run<T>(key: string, work: () => Promise<T>): Promise<T> {
    await this.acquire(key);
    try {
      return await work();
    } finally {
      this.release(key);
    }
  }

  private acquire(key: string): Promise<void> {
    const entry = this.keys.get(key) ?? { running: 0, waiting: [] };
    this.keys.set(key, entry);
    if (entry.running < this.perKey) {
      entry.running += 1;
      return Promise.resolve();
    }
    const retryAfterSeconds = Math.max(1, Math.ceil(this.waitMs / 1000));
    if (entry.waiting.length >= this.queue) return Promise.reject(new TooManyInFlightError(retryAfterSeconds));
    return new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        entry.waiting.splice(entry.waiting.indexOf(start), 1);
        reject(new TooManyInFlightError(retryAfterSeconds));
      }, this.waitMs);
      const start = () => {
        clearTimeout(timer);
        resolve();
      };
      entry.waiting.push(start);
    });
  }

  private release(key: string): void {
    const entry = this.keys.get(key)!;
    // The slot passes straight to the next in line, so a newcomer cannot overtake the queue.
    const next = entry.waiting.shift();
    if (next) return next();
    entry.running -= 1;
    if (entry.running === 0) this.keys.delete(key);
  }
}
