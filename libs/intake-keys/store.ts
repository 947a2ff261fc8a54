import type { Database } from '../delivery-store/index.js';
import { dropPartitionsEndedBy, ensureDaysAhead, withLockWait } from '../delivery-store/schema.js';

/**
 * Intake keys are rows of `intake_keys` (partitioned by the UTC day of first sight), one per key
 * seen in the last INTAKE_DEDUPE_WINDOW: what decides a repeat. Times are PostgreSQL's clock.
 */

export interface IntakeKey {
  merchantId: string;
  /** The webhook id: the upstream messageId, else the body's digest. */
  webhookId: string;
  /** The body's digest (16 bytes), kept on a first sight: a repeat whose body differs is told apart. None: never told. */
  digest?: Buffer;
}

export type KeyStates = Awaited<ReturnType<IntakeKeyStore['check']>>;

/** A repeat dropped: counted on its key's row with the next batch. */
export type KeyNote = IntakeKey;

/**
 * How long the upkeep waits for the table's lock to make or drop a day's partition: every check
 * queues behind the wait. Behind a long read (pg_dump, an export) it waited out the statement
 * timeout, and every check meanwhile ran past its deadline and was skipped (a repeat delivered
 * again), every 30 s while the read lasted; refused now, it is tried again 30 s later.
 */
const UPKEEP_LOCK_WAIT = '200ms';

/** One batch in one statement: intake_check (migration 0028's signature), whose answer is one row of 1-based indexes. */
const CHECK = 'SELECT repeats, recorded, changed FROM intake_check($1::text[], $2::text[], $3::bytea[], $4::float8, $5::text[], $6::text[])';

export class IntakeKeyStore {
  constructor(private readonly db: Pick<Database, 'query' | 'transaction'>, readonly windowMs: number) {}

  /**
   * Checks (and records) `keys`, distinct, and counts `dropped` repeats, in one statement. Answers
   * indexes into `keys`: `repeats`, those seen before (in the window, or by another dispatcher at the
   * same moment); of those, `recorded`, whose webhook the delivery log holds or a wait carries (0024):
   * its first walk was settled, so a redelivered copy is not that walk's own; and `changed`, whose
   * body differs from the one the key was first seen with (0028).
   */
  async check(keys: readonly IntakeKey[], dropped: readonly KeyNote[] = []) {
    const { rows } = await this.db.query<{ repeats: number[]; recorded: number[]; changed: number[] }>(CHECK, [
      keys.map((k) => k.merchantId),
      keys.map((k) => k.webhookId),
      keys.map((k) => k.digest ?? null),
      this.windowMs,
      dropped.map((n) => n.merchantId),
      dropped.map((n) => n.webhookId),
    ]);
    const index = (ns: readonly (number | string)[]) => new Set(ns.map((n) => Number(n) - 1));
    return { repeats: index(rows[0]?.repeats ?? []), recorded: index(rows[0]?.recorded ?? []), changed: index(rows[0]?.changed ?? []) };
  }

  /** The endpoints whose delivery of this webhook the log holds or a wait carries ('' for a row written before endpoints). */
  async recordedEndpoints(key: IntakeKey): Promise<string[]> {
    const { rows } = await this.db.query<{ endpoint_id: string }>(
      // A wait settles an endpoint's walk as its log row does (0024): the wait carries the webhook on.
      'SELECT endpoint_id FROM delivery_webhooks WHERE merchant_id = $1 AND webhook_id = $2 UNION SELECT endpoint_id FROM webhook_waits WHERE merchant_id = $1 AND webhook_id = $2',
      [key.merchantId, key.webhookId],
    );
    return rows.map((row) => row.endpoint_id);
  }

  /** Makes the partitions of today and tomorrow, and drops those past the window. Safe from several dispatchers at once. */
  async maintain(): Promise<{ dropped: string[] }> {
    const upkeep = withLockWait(this.db, UPKEEP_LOCK_WAIT);
    const now = await ensureDaysAhead(upkeep, 'intake_keys');
    return { dropped: await dropPartitionsEndedBy(upkeep, 'intake_keys', now - this.windowMs) };
  }
}
