import type { Queryable } from '../delivery-store/index.js';
import type { ScalarHeaders } from '../contracts/index.js';

/**
 * Waits are rows: a webhook that must wait for its next attempt (a failed attempt, a busy
 * endpoint, an open circuit) is one row of `webhook_waits`, the only copy that decides; its bytes
 * are one row of `webhook_bodies`, written once per webhook. `hand` counts the times the row was
 * handed back to `dispatch` or rewritten: a hand-back carries it (x-wait-hand), and only that hand
 * may take, rewrite or end the wait, so a stale copy changes nothing. Due times are PostgreSQL's
 * clock (now()), never a dispatcher host's.
 */

/** Why a webhook waits, as the row and `webhooks waits list` say it. */
export type WaitReason = 'retry' | 'endpoint-busy' | 'circuit-open';

export interface WaitKey {
  merchantId: string;
  webhookId: string;
}

/** A wait to write: a new one (hand 0: a first attempt, with its bytes), or the next one of a hand-back. */
export interface WaitPut extends WaitKey {
  /** The hand-back this wait follows (x-wait-hand), or 0 for a message that was never a wait. */
  hand: number;
  /** Real attempts made so far. */
  attempt: number;
  delayMs: number;
  reason: WaitReason;
  /** What the next attempt's message carries: attempts, deferrals, postponements, resent, test, last error. */
  headers: ScalarHeaders;
  /** The message's bytes as received; only for hand 0. */
  content?: Buffer;
}

/** The attempt of hand-back `hand` ended (delivered, failed, skipped): the wait goes. */
export interface WaitEnd extends WaitKey {
  hand: number;
}

/** A wait handed back: the message to publish to `dispatch`. */
export interface HandedWait extends WaitKey {
  hand: number;
  headers: ScalarHeaders;
  content: Buffer;
}

export interface WaitRow {
  merchant_id: string;
  webhook_id: string;
  attempt: number;
  reason: string;
  due_at: Date;
  hand: number;
  handed_until: Date | null;
}

/**
 * One batch of writes in one statement: new waits (their bytes once, ON CONFLICT DO NOTHING: a
 * redelivered first attempt finds its own row), next waits of hand-backs (only where the hand
 * still matches), and ended waits with their bytes.
 */
const WRITE = `
WITH puts AS (
  SELECT * FROM unnest($1::text[], $2::text[], $3::int[], $4::int[], $5::float8[], $6::text[], $7::text[], $8::text[])
    AS p(merchant_id, webhook_id, hand, attempt, delay_ms, reason, headers, content)
), bodies AS (
  INSERT INTO webhook_bodies (merchant_id, webhook_id, content)
  SELECT merchant_id, webhook_id, decode(content, 'hex') FROM puts WHERE hand = 0
  ON CONFLICT DO NOTHING
), fresh AS (
  INSERT INTO webhook_waits (merchant_id, webhook_id, attempt, due_at, pick_at, reason, headers)
  SELECT merchant_id, webhook_id, attempt, now() + delay_ms * interval '1 millisecond', now() + delay_ms * interval '1 millisecond', reason, headers::jsonb
  FROM puts WHERE hand = 0
  ON CONFLICT DO NOTHING
), next AS (
  UPDATE webhook_waits w SET hand = w.hand + 1, attempt = p.attempt, reason = p.reason, headers = p.headers::jsonb,
    due_at = now() + p.delay_ms * interval '1 millisecond', pick_at = now() + p.delay_ms * interval '1 millisecond'
  FROM puts p WHERE p.hand > 0 AND w.merchant_id = p.merchant_id AND w.webhook_id = p.webhook_id AND w.hand = p.hand
), gone AS (
  DELETE FROM webhook_waits w USING unnest($9::text[], $10::text[], $11::int[]) AS e(merchant_id, webhook_id, hand)
  WHERE w.merchant_id = e.merchant_id AND w.webhook_id = e.webhook_id AND w.hand = e.hand
  RETURNING w.merchant_id, w.webhook_id
), gone_bodies AS (
  DELETE FROM webhook_bodies b USING gone g WHERE b.merchant_id = g.merchant_id AND b.webhook_id = g.webhook_id
)
SELECT 1`;

/**
 * The scheduler's pick: due rows, oldest first, that no other dispatcher holds (SKIP LOCKED); each
 * gets a new hand and a lease (pick_at moves to its end), so a hand-back that never comes to an
 * attempt (purged, lost with a node) is handed on again by the same row.
 */
const PICK = `
WITH due AS (
  SELECT merchant_id, webhook_id, endpoint_id FROM webhook_waits
  WHERE pick_at <= now() ORDER BY pick_at LIMIT $1 FOR UPDATE SKIP LOCKED
)
UPDATE webhook_waits w SET hand = w.hand + 1, pick_at = now() + $2::float8 * interval '1 millisecond'
FROM due WHERE w.merchant_id = due.merchant_id AND w.webhook_id = due.webhook_id AND w.endpoint_id = due.endpoint_id
RETURNING w.merchant_id, w.webhook_id, w.hand, w.headers::text AS headers,
  (SELECT b.content FROM webhook_bodies b WHERE b.merchant_id = w.merchant_id AND b.webhook_id = w.webhook_id) AS content`;

export class WaitStore {
  constructor(private readonly db: Queryable) {}

  /** Writes one batch (one statement, so all of it or nothing). Two puts of one key keep the last. */
  async write(puts: readonly WaitPut[], ends: readonly WaitEnd[]): Promise<void> {
    const last = new Map<string, WaitPut>();
    for (const put of puts) last.set(`${put.merchantId}\u001f${put.webhookId}`, put);
    const p = [...last.values()];
    await this.db.query(WRITE, [
      p.map((w) => w.merchantId),
      p.map((w) => w.webhookId),
      p.map((w) => w.hand),
      p.map((w) => w.attempt),
      p.map((w) => w.delayMs),
      p.map((w) => w.reason),
      p.map((w) => JSON.stringify(w.headers)),
      p.map((w) => (w.hand === 0 ? (w.content ?? Buffer.alloc(0)).toString('hex') : null)),
      ends.map((e) => e.merchantId),
      ends.map((e) => e.webhookId),
      ends.map((e) => e.hand),
    ]);
  }

  /**
   * A hand-back comes to its attempt: true when it is the wait's current hand (its lease is
   * extended for the attempt), false for a stale copy (another hand, or the wait has ended).
   */
  async take(key: WaitKey, hand: number, leaseMs: number): Promise<boolean> {
    const { rows } = await this.db.query(
      `UPDATE webhook_waits SET pick_at = now() + $4::float8 * interval '1 millisecond'
       WHERE merchant_id = $1 AND webhook_id = $2 AND hand = $3 RETURNING 1 AS taken`,
      [key.merchantId, key.webhookId, hand, leaseMs],
    );
    return rows.length > 0;
  }

  /** Up to `limit` due waits, each handed on with a lease of `leaseMs`. */
  async pick(limit: number, leaseMs: number): Promise<HandedWait[]> {
    const { rows } = await this.db.query<{ merchant_id: string; webhook_id: string; hand: number; headers: string; content: Uint8Array | null }>(PICK, [limit, leaseMs]);
    return rows.map((row) => ({
      merchantId: row.merchant_id,
      webhookId: row.webhook_id,
      hand: row.hand,
      headers: JSON.parse(row.headers) as ScalarHeaders,
      content: Buffer.from(row.content ?? new Uint8Array()),
    }));
  }

  /** A hand-back the broker did not take: due again now, unless another hand moved on. */
  async unhand(key: WaitKey, hand: number): Promise<void> {
    await this.db.query('UPDATE webhook_waits SET pick_at = now() WHERE merchant_id = $1 AND webhook_id = $2 AND hand = $3', [key.merchantId, key.webhookId, hand]);
  }

  /** Waiting now, and of those past their due time by more than `overdueMs`. */
  async census(overdueMs: number): Promise<{ waiting: number; overdue: number }> {
    const { rows } = await this.db.query<{ waiting: number; overdue: number }>(
      `SELECT count(*)::integer AS waiting,
         -- An 'ordered' wait (no pick time) is due when the webhook before it ends, not at a time: never overdue.
         count(*) FILTER (WHERE due_at < now() - $1::float8 * interval '1 millisecond' AND pick_at IS NOT NULL)::integer AS overdue
       FROM webhook_waits`,
      [overdueMs],
    );
    return rows[0] ?? { waiting: 0, overdue: 0 };
  }

  /** A merchant's waits (or everyone's), soonest due first: what `webhooks waits list` shows. */
  async list(filter: { merchantId?: string; limit: number }): Promise<WaitRow[]> {
    const { rows } = await this.db.query<WaitRow>(
      `SELECT merchant_id, webhook_id, attempt, reason, due_at, hand,
         CASE WHEN pick_at > due_at THEN pick_at END AS handed_until
       FROM webhook_waits WHERE ($1::text IS NULL OR merchant_id = $1) ORDER BY due_at, merchant_id, webhook_id LIMIT $2`,
      [filter.merchantId ?? null, filter.limit],
    );
    return rows;
  }
}
