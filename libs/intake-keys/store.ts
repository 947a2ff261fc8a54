import type { Database } from '../delivery-store/index.js';
import { dropPartitionsEndedBy, ensureDaysAhead, withLockWait } from '../delivery-store/schema.js';

/** One row of `intake_keys` (partitioned by day of first sight) per key seen in INTAKE_DEDUPE_WINDOW. */
export interface IntakeKey {
  merchantId: string;
  webhookId: string;
  /** The body's digest, kept on a first sight: a repeat whose body differs is told apart. */
  digest?: Buffer;
}

export type KeyStates = Awaited<ReturnType<IntakeKeyStore['check']>>;

export type KeyNote = IntakeKey;

/** Every check queues behind the upkeep's wait for the table's lock: refused past this, it is tried again later. */
const UPKEEP_LOCK_WAIT = '200ms';

/** Answers one row of 1-based indexes. Its keys' rows are locked in the order given (0028's insert reads them so); no notes: see COUNT. */
const CHECK = "SELECT repeats, recorded, changed FROM intake_check($1::text[], $2::text[], $3::bytea[], $4::float8, '{}', '{}')";

/** Counts repeats on their keys' rows, locked in the order given (FOR UPDATE after the sort), as a check locks its keys'. */
const COUNT = `WITH noted AS (
  SELECT merchant_id, webhook_id, count(*)::integer AS duplicates, min(n) AS n
  FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS d(merchant_id, webhook_id, n) GROUP BY merchant_id, webhook_id
), locked AS (
  SELECT i.day, i.merchant_id, i.webhook_id, d.duplicates FROM noted d JOIN intake_keys i ON i.merchant_id = d.merchant_id AND i.webhook_id = d.webhook_id
  WHERE i.day >= date_trunc('day', now() - $3::float8 * interval '1 millisecond', 'UTC') AND i.first_seen_at > now() - $3::float8 * interval '1 millisecond'
  ORDER BY d.n, i.day FOR UPDATE OF i
)
UPDATE intake_keys i SET duplicates = i.duplicates + l.duplicates, last_duplicate_at = now() FROM locked l
WHERE i.merchant_id = l.merchant_id AND i.webhook_id = l.webhook_id AND i.day = l.day`;

const before = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

/**
 * One order for every statement's row locks: two checks locking crossed keys (two dispatchers given
 * one replay in different orders) waited on each other until PostgreSQL aborted one (40P01).
 */
const byKey = (a: IntakeKey, b: IntakeKey) => before(a.merchantId, b.merchantId) || before(a.webhookId, b.webhookId);

export class IntakeKeyStore {
  constructor(private readonly db: Pick<Database, 'query' | 'transaction'>, readonly windowMs: number) {}

  /** Records distinct `keys`, counts `dropped`; `recorded`: a repeat whose first walk settled (log row or wait). */
  async check(keys: readonly IntakeKey[], dropped: readonly KeyNote[] = []) {
    // Counted first, in a transaction of its own: counted in the check's (0028), a check held its keys' rows while it waited for another's.
    const notes = [...dropped].sort(byKey);
    if (notes.length > 0) await this.db.query(COUNT, [notes.map((n) => n.merchantId), notes.map((n) => n.webhookId), this.windowMs]);
    const order = keys.map((_, i) => i).sort((a, b) => byKey(keys[a]!, keys[b]!));
    const sorted = order.map((i) => keys[i]!);
    const { rows } = sorted.length === 0 ? { rows: [] } : await this.db.query<{ repeats: number[]; recorded: number[]; changed: number[] }>(CHECK, [
      sorted.map((k) => k.merchantId),
      sorted.map((k) => k.webhookId),
      sorted.map((k) => k.digest ?? null),
      this.windowMs,
    ]);
    // The statement's 1-based places, as indexes of `keys`.
    const index = (ns: readonly (number | string)[]) => new Set(ns.map((n) => order[Number(n) - 1]!));
    return { repeats: index(rows[0]?.repeats ?? []), recorded: index(rows[0]?.recorded ?? []), changed: index(rows[0]?.changed ?? []) };
  }

  /** The endpoints whose delivery of this webhook the log holds or a wait carries on. */
  async recordedEndpoints(key: IntakeKey): Promise<string[]> {
    const { rows } = await this.db.query<{ endpoint_id: string }>(
      'SELECT endpoint_id FROM delivery_webhooks WHERE merchant_id = $1 AND webhook_id = $2 UNION SELECT endpoint_id FROM webhook_waits WHERE merchant_id = $1 AND webhook_id = $2',
      [key.merchantId, key.webhookId],
    );
    return rows.map((row) => row.endpoint_id);
  }

  /** Makes today's and tomorrow's partitions, drops those past the window. Safe from several dispatchers at once. */
  async maintain(): Promise<{ dropped: string[] }> {
    const upkeep = withLockWait(this.db, UPKEEP_LOCK_WAIT);
    const now = await ensureDaysAhead(upkeep, 'intake_keys');
    return { dropped: await dropPartitionsEndedBy(upkeep, 'intake_keys', now - this.windowMs) };
  }
}
