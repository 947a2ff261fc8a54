import type { Queryable } from '../delivery-store/index.js';
import { dayOf, dropPartitionsEndedBy, ensurePartition } from '../delivery-store/schema.js';

/**
 * Intake keys are rows (table `intake_keys`, partitioned by the UTC day of first sight): one per
 * key an upstream message carried in the last INTAKE_DEDUPE_WINDOW, the one copy that decides
 * whether a message is a repeat. Times are PostgreSQL's clock (now()), never a dispatcher's.
 */

export interface IntakeKey {
  merchantId: string;
  /** The webhook id: the upstream messageId, else the body's digest. */
  webhookId: string;
}

/** What the table says of a key: first seen now (its row written), or seen before and whether that delivery ended. */
export interface KeyState {
  first: boolean;
  /** Seen before: its first delivery was acked (delivered, waiting, failed, skipped, parked). */
  ended: boolean;
}

/** A note for a live key, written with the next batch: its first delivery ended, or a repeat of it was dropped. */
export type KeyNote = IntakeKey & { kind: 'ended' | 'duplicate' };

const DAY_MS = 86_400_000;

/**
 * One batch in one statement. `live`: the keys' rows still in the window (on the window's day
 * partitions only). `fresh`: the keys without one, inserted into today's partition; a row of the
 * same day past the window (a window under a day) is taken over, and a row another dispatcher
 * inserted meanwhile is not (no row returned: that copy was first). `touched`: the notes, applied
 * to live rows only, so they never meet a row `fresh` changes in the same statement.
 */
const CHECK = `
WITH input AS (
  SELECT DISTINCT merchant_id, webhook_id FROM unnest($1::text[], $2::text[]) AS k(merchant_id, webhook_id)
), live AS (
  SELECT i.merchant_id, i.webhook_id, bool_or(i.ended) AS ended
  FROM intake_keys i JOIN input k ON i.merchant_id = k.merchant_id AND i.webhook_id = k.webhook_id
  WHERE i.day >= date_trunc('day', now() - $3::float8 * interval '1 millisecond', 'UTC')
    AND i.first_seen_at > now() - $3::float8 * interval '1 millisecond'
  GROUP BY i.merchant_id, i.webhook_id
), fresh AS (
  INSERT INTO intake_keys AS i (day, merchant_id, webhook_id)
  SELECT date_trunc('day', now(), 'UTC'), merchant_id, webhook_id FROM input k
  WHERE NOT EXISTS (SELECT 1 FROM live l WHERE l.merchant_id = k.merchant_id AND l.webhook_id = k.webhook_id)
  ON CONFLICT (merchant_id, webhook_id, day) DO UPDATE SET first_seen_at = now(), ended = false, duplicates = 0, last_duplicate_at = NULL
  WHERE i.first_seen_at <= now() - $3::float8 * interval '1 millisecond'
  RETURNING i.merchant_id, i.webhook_id
), touched AS (
  UPDATE intake_keys i SET ended = i.ended OR t.ended, duplicates = i.duplicates + t.duplicates,
    last_duplicate_at = CASE WHEN t.duplicates > 0 THEN now() ELSE i.last_duplicate_at END
  FROM (
    SELECT merchant_id, webhook_id, bool_or(kind = 'ended') AS ended, (count(*) FILTER (WHERE kind = 'duplicate'))::integer AS duplicates
    FROM unnest($4::text[], $5::text[], $6::text[]) AS n(merchant_id, webhook_id, kind) GROUP BY merchant_id, webhook_id
  ) t
  WHERE i.merchant_id = t.merchant_id AND i.webhook_id = t.webhook_id
    AND i.day >= date_trunc('day', now() - $3::float8 * interval '1 millisecond', 'UTC')
    AND i.first_seen_at > now() - $3::float8 * interval '1 millisecond'
)
SELECT k.merchant_id, k.webhook_id, f.merchant_id IS NOT NULL AS first, coalesce(l.ended, false) AS ended
FROM input k
LEFT JOIN fresh f ON f.merchant_id = k.merchant_id AND f.webhook_id = k.webhook_id
LEFT JOIN live l ON l.merchant_id = k.merchant_id AND l.webhook_id = k.webhook_id`;

export class IntakeKeyStore {
  constructor(private readonly db: Queryable, readonly windowMs: number) {}

  /** Checks (and records) `keys`, and applies `notes`, in one statement; the states by `merchantId\u001fwebhookId`. */
  async check(keys: readonly IntakeKey[], notes: readonly KeyNote[] = []): Promise<Map<string, KeyState>> {
    const { rows } = await this.db.query<{ merchant_id: string; webhook_id: string; first: boolean; ended: boolean }>(CHECK, [
      keys.map((k) => k.merchantId),
      keys.map((k) => k.webhookId),
      this.windowMs,
      notes.map((n) => n.merchantId),
      notes.map((n) => n.webhookId),
      notes.map((n) => n.kind),
    ]);
    return new Map(rows.map((row) => [keyOf({ merchantId: row.merchant_id, webhookId: row.webhook_id }), { first: row.first, ended: row.ended }]));
  }

  /**
   * Makes the partitions of PostgreSQL's today and tomorrow (so the day turns with one ready) and
   * drops those whose every key is past the window. Safe from several dispatchers at once.
   */
  async maintain(): Promise<{ dropped: string[] }> {
    const { rows } = await this.db.query<{ now: Date }>('SELECT now() AS now');
    const now = new Date(rows[0]!.now).getTime();
    for (const day of [dayOf(new Date(now)), dayOf(new Date(now + DAY_MS))]) {
      try {
        await ensurePartition(this.db, 'intake_keys', day);
      } catch (err) {
        // Another dispatcher made it at the same moment (IF NOT EXISTS does not cover the race).
        if (!['42P07', '23505'].includes((err as { code?: string }).code ?? '')) throw err;
      }
    }
    return { dropped: await dropPartitionsEndedBy(this.db, 'intake_keys', now - this.windowMs) };
  }

  /** What the log shows on a webhook: repeats of its key dropped, and the last one's time (PostgreSQL's). */
  async duplicatesOf(key: IntakeKey): Promise<{ duplicates: number; lastDuplicateAt: Date | null } | undefined> {
    const { rows } = await this.db.query<{ duplicates: number; last_duplicate_at: Date | null }>(
      'SELECT duplicates, last_duplicate_at FROM intake_keys WHERE merchant_id = $1 AND webhook_id = $2 ORDER BY day DESC LIMIT 1',
      [key.merchantId, key.webhookId],
    );
    return rows[0] && { duplicates: rows[0].duplicates, lastDuplicateAt: rows[0].last_duplicate_at };
  }
}

export function keyOf(key: IntakeKey): string {
  return `${key.merchantId}\u001f${key.webhookId}`;
}
