import type { Queryable } from '../../libs/delivery-store/index.js';
import { isUnavailable, MerchantStoreUnavailableError } from '../../libs/merchants/index.js';

export type Allowance = { ok: true } | { ok: false; retryAfterSeconds: number };

/** `burst` requests at once per key, refilled at `perMinute`. */
export interface RateLimiter {
  take(key: string): Promise<Allowance>;
}

/**
 * In this instance's memory: for what bounds this instance's own resources (its log-read pool),
 * and for a deployment without a database (MERCHANTS_FILE), which runs one API.
 */
export class MemoryRateLimiter implements RateLimiter {
  private readonly buckets = new Map<string, { tokens: number; at: number }>();

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
    if (this.buckets.size > 100_000) this.buckets.clear();
    if (bucket.tokens >= 1) {
      bucket.tokens -= 1;
      return { ok: true };
    }
    return { ok: false, retryAfterSeconds: Math.max(1, Math.ceil((1 - bucket.tokens) / ratePerMs / 1000)) };
  }
}

/**
 * In PostgreSQL, so that every API replica counts against one limit: a row per key holding its
 * theoretical arrival time (GCRA, the token bucket as one timestamp). Taking is one upsert that
 * moves it only when the request fits; PostgreSQL's clock judges, the same for every replica.
 */
export class SharedRateLimiter implements RateLimiter {
  private takes = 0;

  constructor(
    private readonly db: Queryable,
    /** Names the limit, so that one key (a merchant id) has a row per limit. */
    private readonly name: string,
    perMinute: number,
    private readonly burst: number,
  ) {
    this.intervalMs = 60_000 / perMinute;
  }

  private readonly intervalMs: number;

  async take(key: string): Promise<Allowance> {
    const id = `${this.name}:${key}`;
    try {
      const { rows } = await this.db.query(
        `INSERT INTO rate_limits AS r (key, tat) VALUES ($1, now() + $2::float8 * interval '1 millisecond')
         ON CONFLICT (key) DO UPDATE SET tat = GREATEST(r.tat, now()) + $2::float8 * interval '1 millisecond'
         WHERE GREATEST(r.tat, now()) + $2::float8 * interval '1 millisecond' <= now() + $3::float8 * interval '1 millisecond'
         RETURNING 1`,
        [id, this.intervalMs, this.burst * this.intervalMs],
      );
      // Keys whose bucket is full again hold nothing worth keeping: swept now and then.
      if (++this.takes % 1_000 === 0) void this.db.query("DELETE FROM rate_limits WHERE tat < now() - interval '1 minute'").catch(() => {});
      if (rows.length > 0) return { ok: true };
      const waited = await this.db.query<{ wait_ms: number }>(
        `SELECT EXTRACT(EPOCH FROM (GREATEST(tat, now()) - now())) * 1000 + $2::float8 - $3::float8 AS wait_ms FROM rate_limits WHERE key = $1`,
        [id, this.intervalMs, this.burst * this.intervalMs],
      );
      return { ok: false, retryAfterSeconds: Math.max(1, Math.ceil(Number(waited.rows[0]?.wait_ms ?? this.intervalMs) / 1000)) };
    } catch (err) {
      if (isUnavailable(err)) throw new MerchantStoreUnavailableError(err);
      throw err;
    }
  }
}
