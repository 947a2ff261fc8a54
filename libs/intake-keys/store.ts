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

/** Answers one row of 1-based indexes. */
const CHECK = 'SELECT repeats, recorded, changed FROM intake_check($1::text[], $2::text[], $3::bytea[], $4::float8, $5::text[], $6::text[])';

export class IntakeKeyStore {
  constructor(private readonly db: Pick<Database, 'query' | 'transaction'>, readonly windowMs: number) {}

  /** Records distinct `keys`, counts `dropped`; `recorded`: a repeat whose first walk settled (log row or wait). */
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
