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

/**
 * What the table says of a batch's keys (indexes into the keys checked): `repeats`, the keys seen
 * before (within the window, or inserted by another dispatcher at the same moment); of those,
 * `recorded`, the ones whose webhook the delivery log holds: its first delivery was settled (a
 * record is written after a delivery's effect and before its ack), so a redelivered copy of it is
 * not that delivery's own.
 */
export interface KeyStates {
  repeats: Set<number>;
  recorded: Set<number>;
}

/** A repeat dropped: counted on its key's row with the next batch. */
export type KeyNote = IntakeKey;

const DAY_MS = 86_400_000;

/**
 * One batch in one statement: intake_check (migration 0012), a function so that PostgreSQL keeps
 * its plan. The keys are distinct. `earlier`: keys first seen on an earlier day's partition, still
 * within the window. `fresh`: the others, inserted into today's partition, where the primary key
 * finds today's repeats; a row of today past the window (a window under a day) is taken over, and
 * a row another dispatcher inserted meanwhile is not (no row returned: that copy was first).
 * `counted`: the repeats dropped since the last batch, on live rows only, so never a row `fresh`
 * changes in the same statement. The answer is one row of indexes (1-based): a batch's first
 * sights cost no row to send back.
 */
const CHECK = 'SELECT repeats, recorded FROM intake_check($1::text[], $2::text[], $3::float8, $4::text[], $5::text[])';

export class IntakeKeyStore {
  constructor(private readonly db: Queryable, readonly windowMs: number) {}

  /** Checks (and records) `keys`, distinct, and counts `dropped` repeats, in one statement. */
  async check(keys: readonly IntakeKey[], dropped: readonly KeyNote[] = []): Promise<KeyStates> {
    const { rows } = await this.db.query<{ repeats: number[]; recorded: number[] }>(CHECK, [
      keys.map((k) => k.merchantId),
      keys.map((k) => k.webhookId),
      this.windowMs,
      dropped.map((n) => n.merchantId),
      dropped.map((n) => n.webhookId),
    ]);
    const index = (ns: readonly (number | string)[]) => new Set(ns.map((n) => Number(n) - 1));
    return { repeats: index(rows[0]?.repeats ?? []), recorded: index(rows[0]?.recorded ?? []) };
  }

  /**
   * The endpoints whose delivery of this webhook the delivery log holds ('' for a row written
   * before endpoints): each was settled (its record follows its effect), so a redelivered
   * fanned-out copy of it need not go to them again.
   */
  async recordedEndpoints(key: IntakeKey): Promise<string[]> {
    const { rows } = await this.db.query<{ endpoint_id: string }>(
      'SELECT endpoint_id FROM delivery_webhooks WHERE merchant_id = $1 AND webhook_id = $2',
      [key.merchantId, key.webhookId],
    );
    return rows.map((row) => row.endpoint_id);
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
