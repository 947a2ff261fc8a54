import { type Database, erasedMerchantSql, type Queryable } from '../delivery-store/index.js';
import { isDataRefusal } from '../delivery-store/refusals.js';
import { HEADERS, type ScalarHeaders } from '../contracts/index.js';
import { among, type Among, amongParams, CIRCUIT_CHANNEL, type CircuitKey, type CircuitState, closeIn, CONTENT, keyOf, keyParams, NEW_HAND, PROBE, UNPARK } from './circuits.js';

// A row of `webhook_waits` decides: only its current `hand` may take, rewrite or end it, not a stale copy.

/** Takes with no outcome before the next is parked: dispatch's delivery limit never counts hand-backs. */
export const WAIT_TAKE_LIMIT = 10;

/** Whether row `w` was taken past WAIT_TAKE_LIMIT: out of the pick, its copy parked. */
const spent = (w: string): string => `(${w}.pick_at IS NULL AND ${w}.takes > ${WAIT_TAKE_LIMIT})`;

/** Why a webhook waits, as a dispatcher writes it. */
export type WaitPutReason = 'retry' | 'endpoint-busy' | 'circuit-open' | 'throttled';

/** Also 'ordered': behind an earlier webhook of its reference (written by webhook_order_step, with no pick time). */
export type WaitReason = WaitPutReason | 'ordered';

export interface WaitKey {
  merchantId: string;
  webhookId: string;
  /** Absent: '' (written before fan-out). */
  endpointId?: string;
}

/** A new wait (hand 0: a first attempt, with its bytes), or the next one of a hand-back. */
export interface WaitPut extends WaitKey {
  /** The hand-back this wait follows (x-wait-hand), or 0. */
  hand: number;
  /** Real attempts made so far. */
  attempt: number;
  delayMs: number;
  reason: WaitPutReason;
  headers: ScalarHeaders;
  /** Only for hand 0. */
  content?: Buffer;
  /** Until the webhook's schedule is over (may be ≤ 0): a parked wait is handed back then, to fail. */
  spanLeftMs: number;
  /** The attempt's failure opens its endpoint's circuit for this long, this wait parked. */
  circuitMs?: number;
  /** The failed attempt was the probe: only its `circuitMs` moves an open row's probe time. */
  probe?: boolean;
  /** Answered (a 4xx): its endpoint's circuit closes, this wait made due with the parked ones. */
  closesCircuit?: boolean;
}

/** The attempt of hand-back `hand` ended: the wait goes. */
export interface WaitEnd extends WaitKey {
  /** 0: a copy moved back from `invalid` ended, ending its key's wait only if spent. */
  hand: number;
  /** The endpoint answered, or can no longer be sent to: its circuit closes. */
  closesCircuit?: boolean;
  /** Closed because the endpoint was turned off, not answered: its breakers keep their failures in a row. */
  unanswered?: boolean;
}

/** One hand of one wait, as a string: what WaitStore.take() keys its answer by. */
export function takeKey(take: WaitEnd): string {
  return `${take.merchantId}\u001f${take.webhookId}\u001f${take.endpointId ?? ''}\u001f${take.hand}`;
}

/** A wait handed back: the message to publish to `dispatch`. */
export interface HandedWait extends WaitKey {
  hand: number;
  headers: ScalarHeaders;
  content: Buffer;
  /** The lease's end as PostgreSQL wrote it (text, to the microsecond): what `unhand` expects to find. */
  leaseEnd: string;
  /** Its circuit's probe: sent through the open circuit. */
  probe?: boolean;
}

export interface WaitRow {
  merchant_id: string;
  webhook_id: string;
  endpoint_id: string;
  attempt: number;
  reason: WaitReason;
  due_at: Date;
  hand: number;
  handed_until: Date | null;
  parked: boolean;
  spent: boolean;
}

/**
 * One batch of writes; a next wait only where its hand still matches. Circuit rows are read FOR SHARE,
 * so a close waits for this statement and the unpark sees what it parked. Returns the circuits to close.
 */
const WRITE = `
WITH puts AS (
  SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::int[], $5::int[], $6::float8[], $7::text[], $8::text[], $9::text[], $10::float8[], $11::float8[], $12::boolean[])
    AS p(merchant_id, webhook_id, endpoint_id, hand, attempt, delay_ms, reason, headers, content, span_ms, circuit_ms, probe)
  -- Not for a merchant deleted meanwhile: its waits and bytes stay deleted.
  WHERE NOT ${erasedMerchantSql('p.merchant_id')}
), opened AS (
  INSERT INTO wait_circuits (merchant_id, endpoint_id, probe_at, cooldown_ms)
  SELECT merchant_id, endpoint_id, now() + max(circuit_ms) * interval '1 millisecond', max(circuit_ms) FROM puts WHERE circuit_ms IS NOT NULL GROUP BY merchant_id, endpoint_id
  ON CONFLICT (merchant_id, endpoint_id) DO UPDATE SET probe_at = excluded.probe_at, cooldown_ms = excluded.cooldown_ms, closing = false
  -- An open row is moved only by its probe's failure.
  WHERE wait_circuits.closing OR (excluded.merchant_id, excluded.endpoint_id) IN (SELECT merchant_id, endpoint_id FROM puts WHERE circuit_ms IS NOT NULL AND probe)
  RETURNING pg_notify('${CIRCUIT_CHANNEL}', json_build_object('m', merchant_id, 'e', endpoint_id, 'open', true, 'cooldown', cooldown_ms, 'probe', cooldown_ms)::text)
), open AS (
  SELECT merchant_id, endpoint_id FROM wait_circuits WHERE (merchant_id, endpoint_id) IN (SELECT merchant_id, endpoint_id FROM puts) AND NOT closing FOR SHARE
), waits AS (
  SELECT p.*, now() + p.delay_ms * interval '1 millisecond' AS due_at, now() + p.span_ms * interval '1 millisecond' AS span_ends_at,
    (p.circuit_ms IS NOT NULL OR (p.merchant_id, p.endpoint_id) IN (SELECT merchant_id, endpoint_id FROM open)) AS parked
  FROM puts p
), placed AS (
  -- Parked: out of the pick until its span ends (or its circuit closes).
  SELECT *, CASE WHEN parked THEN GREATEST(due_at, span_ends_at) ELSE due_at END AS pick_at FROM waits
), bodies AS (
  INSERT INTO webhook_bodies (merchant_id, webhook_id, endpoint_id, content)
  SELECT merchant_id, webhook_id, endpoint_id, decode(content, 'hex') FROM puts WHERE hand = 0
  ON CONFLICT DO NOTHING
), fresh AS (
  INSERT INTO webhook_waits (merchant_id, webhook_id, endpoint_id, attempt, due_at, pick_at, reason, headers, parked, span_ends_at)
  SELECT merchant_id, webhook_id, endpoint_id, attempt, due_at, pick_at, reason, headers::jsonb, parked, span_ends_at
  FROM placed WHERE hand = 0
  -- A redelivered first attempt leaves its row; a spent one is taken over by its copy moved back from invalid,
  -- and one of an earlier send by a resend's (its failure indexed before its end: that end must not delete this).
  -- A row that holds a place in order (an 'ordered' wait, an ordered retry) keeps its mark: the wait taking it
  -- over carries the webhook, so its end ends the place; rewritten unmarked, no end came and the line stopped.
  ON CONFLICT (merchant_id, webhook_id, endpoint_id) DO UPDATE SET hand = ${NEW_HAND}, attempt = excluded.attempt, reason = excluded.reason,
    headers = CASE WHEN webhook_waits.headers->'${HEADERS.ordered}' = 'true' THEN excluded.headers || '{"${HEADERS.ordered}": true}' ELSE excluded.headers END,
    due_at = excluded.due_at, pick_at = excluded.pick_at,
    parked = excluded.parked, span_ends_at = excluded.span_ends_at, takes = 0
  WHERE ${spent('webhook_waits')} OR webhook_waits.headers->>'${HEADERS.resentAt}' IS DISTINCT FROM excluded.headers->>'${HEADERS.resentAt}'
), next AS (
  UPDATE webhook_waits w SET hand = ${NEW_HAND}, attempt = p.attempt, reason = p.reason, headers = p.headers::jsonb,
    due_at = p.due_at, pick_at = p.pick_at, parked = p.parked, span_ends_at = p.span_ends_at, takes = 0
  FROM placed p WHERE p.hand > 0 AND w.merchant_id = p.merchant_id AND w.webhook_id = p.webhook_id AND w.endpoint_id = p.endpoint_id AND w.hand = p.hand
), gone AS (
  DELETE FROM webhook_waits w USING unnest($13::text[], $14::text[], $15::text[], $16::int[]) AS e(merchant_id, webhook_id, endpoint_id, hand)
  WHERE w.merchant_id = e.merchant_id AND w.webhook_id = e.webhook_id AND w.endpoint_id = e.endpoint_id
    AND CASE WHEN e.hand = 0 THEN ${spent('w')} ELSE w.hand = e.hand END
  RETURNING w.merchant_id, w.webhook_id, w.endpoint_id
), gone_bodies AS (
  DELETE FROM webhook_bodies b USING gone g WHERE b.merchant_id = g.merchant_id AND b.webhook_id = g.webhook_id AND b.endpoint_id = g.endpoint_id
)
SELECT c.merchant_id, c.endpoint_id FROM wait_circuits c JOIN unnest($17::text[], $18::text[]) AS x(merchant_id, endpoint_id)
  ON c.merchant_id = x.merchant_id AND c.endpoint_id = x.endpoint_id WHERE NOT c.closing`;

/** The circuit rows a batch opens, closes or puts waits behind, locked in one order. */
const LOCK_CIRCUITS = `
SELECT 1 FROM wait_circuits c JOIN unnest($1::text[], $2::text[]) AS x(merchant_id, endpoint_id) USING (merchant_id, endpoint_id)
ORDER BY c.merchant_id, c.endpoint_id FOR NO KEY UPDATE OF c`;

/**
 * Due rows, each with a new hand and a lease; one behind an open circuit parked, unless already (its span
 * is over). A row with no span yet (an ordered wait woken, never attempted) is handed back: its attempt's
 * postponement parks it with the webhook's span, where parked at 'infinity' only a probe freed it.
 */
const PICK = `
WITH due AS (
  SELECT merchant_id, webhook_id, endpoint_id, parked, GREATEST(due_at, COALESCE(span_ends_at, now())) AS until FROM webhook_waits
  WHERE pick_at <= now() AND ${among(3, 'wait')} ORDER BY pick_at LIMIT $1 FOR UPDATE SKIP LOCKED
), open AS (
  SELECT merchant_id, endpoint_id FROM wait_circuits WHERE (merchant_id, endpoint_id) IN (SELECT merchant_id, endpoint_id FROM due WHERE NOT parked) AND NOT closing FOR SHARE
), decided AS (
  SELECT d.*, (NOT d.parked AND d.until > now() AND (d.merchant_id, d.endpoint_id) IN (SELECT merchant_id, endpoint_id FROM open)) AS park FROM due d
), parking AS (
  -- A new hand: a copy whose lease ran out (behind a backlog) is stale, not attempted beside the unpark's or probe's.
  UPDATE webhook_waits w SET hand = ${NEW_HAND}, parked = true, pick_at = d.until
  FROM decided d WHERE d.park AND w.merchant_id = d.merchant_id AND w.webhook_id = d.webhook_id AND w.endpoint_id = d.endpoint_id
  RETURNING w.merchant_id
), handed AS (
  UPDATE webhook_waits w SET hand = ${NEW_HAND}, parked = false, pick_at = now() + $2::float8 * interval '1 millisecond'
  FROM decided d WHERE NOT d.park AND w.merchant_id = d.merchant_id AND w.webhook_id = d.webhook_id AND w.endpoint_id = d.endpoint_id
  RETURNING w.merchant_id, w.webhook_id, w.endpoint_id, w.hand, w.headers::text AS headers, w.pick_at::text AS lease_end, ${CONTENT} AS content
)
SELECT * FROM handed UNION ALL SELECT merchant_id, NULL, NULL, NULL, NULL, NULL, NULL FROM parking`;

/**
 * The server's run, beside each transaction id kept: a crash loses the WAL not yet flushed, and with it the
 * ids of transactions that wrote nothing durable, which the next run gives again (what the id says is then
 * another's). A run is the postmaster's start and the last checkpoint: a crash of one backend restarts the
 * server in place, its recovery ending with a checkpoint. A checkpoint with no crash only makes an unsure
 * batch be written again (a wait ended meanwhile delivered twice), never one taken for written.
 */
const RUN = "(extract(epoch FROM pg_postmaster_start_time()) * 1000000)::bigint::text || '/' || (SELECT redo_lsn FROM pg_control_checkpoint())::text";

/** What a pick or probe whose answer was lost leased, due again now, by the rows' xmin (any later write changes it). */
const RELEASE_LOST = `
WITH lost AS (SELECT split_part(x, '@', 1)::bigint % 4294967296 AS xid FROM unnest($1::text[]) AS x WHERE split_part(x, '@', 2) = ${RUN}), probes AS (
  -- Locked, as by the pick's FOR SHARE: a close waits for it.
  UPDATE wait_circuits SET probe_at = now()
  WHERE NOT closing AND probe_at > now() AND probe_at <= now() + $2::float8 * interval '1 millisecond' AND xmin::text::bigint IN (SELECT xid FROM lost)
  RETURNING merchant_id, endpoint_id
)
UPDATE webhook_waits w SET parked = (w.merchant_id, w.endpoint_id) IN (SELECT * FROM probes),
  pick_at = CASE WHEN (w.merchant_id, w.endpoint_id) IN (SELECT * FROM probes) THEN GREATEST(w.due_at, COALESCE(w.span_ends_at, 'infinity')) ELSE now() END
WHERE w.pick_at > now() AND w.pick_at <= now() + $2::float8 * interval '1 millisecond' AND NOT w.parked AND w.xmin::text::bigint IN (SELECT xid FROM lost)`;

/** Lost picks remembered at most: more are a database answering nothing, whose picks committed none. */
const LOST_PICKS_KEPT = 100;

/** A current hand gets a lease, counted unless `again`. No delete: a refused one failed every take batched with it. */
const TAKE = `
WITH asked AS (
  SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::int[], $5::boolean[]) AS t(merchant_id, webhook_id, endpoint_id, hand, again)
)
UPDATE webhook_waits w SET takes = w.takes + CASE WHEN t.again THEN 0 ELSE 1 END,
  pick_at = CASE WHEN w.takes >= $7 AND NOT t.again THEN NULL ELSE now() + $6::float8 * interval '1 millisecond' END
FROM asked t
WHERE w.merchant_id = t.merchant_id AND w.webhook_id = t.webhook_id AND w.endpoint_id = t.endpoint_id AND w.hand = t.hand
RETURNING w.merchant_id, w.webhook_id, w.endpoint_id, w.hand, w.takes > $7 AS spent,
  w.headers -> '${HEADERS.ordered}' = 'true'::jsonb AND EXISTS (
    SELECT 1 FROM webhook_order o WHERE o.merchant_id = w.merchant_id AND o.endpoint_id = w.endpoint_id AND o.webhook_id = w.webhook_id AND o.ended_at IS NOT NULL) AS ended`;

/**
 * NULL (not committed: written again) for a transaction of an earlier run of the server: one that wrote
 * no WAL before a crash left its id unused, in the future or given again to another transaction since.
 */
const XACT_STATUS = `SELECT x AS xid, CASE WHEN split_part(x, '@', 2) = ${RUN} THEN pg_xact_status(split_part(x, '@', 1)::xid8) END AS status
FROM unnest($1::text[]) AS x`;

const CIRCUIT_KEY = 'merchant_id AS "merchantId", endpoint_id AS "endpointId"';

type PickedRow = { merchant_id: string; webhook_id: string | null; endpoint_id: string | null; hand: number; headers: string; lease_end: string; content: Uint8Array | null };

function handedOf(rows: PickedRow[], probe = false): HandedWait[] {
  return rows.filter((row) => row.webhook_id !== null).map((row) => ({
    ...(probe ? { probe } : {}),
    merchantId: row.merchant_id,
    webhookId: row.webhook_id!,
    endpointId: row.endpoint_id ?? '',
    hand: row.hand,
    headers: JSON.parse(row.headers) as ScalarHeaders,
    content: Buffer.from(row.content ?? new Uint8Array()),
    leaseEnd: row.lease_end,
  }));
}

export class WaitStore {
  /** Items of a batch whose try failed under way, with its transaction id and the server run that gave it (xid@run): perhaps committed. */
  private readonly unsure = new WeakMap<object, string>();
  /** The transaction ids of picks and probes that failed under way: perhaps committed (RELEASE_LOST). */
  private lostPicks: string[] = [];

  constructor(private readonly db: Pick<Database, 'query' | 'transaction'>) {}

  /** One batch, circuit closes included, in one transaction: a failed close leaves nothing for the retry to redo. */
  async write(tried: readonly WaitPut[], triedEnds: readonly WaitEnd[], triedCloses: readonly CircuitKey[] = []): Promise<void> {
    const written = await this.committed([...tried, ...triedEnds, ...triedCloses]);
    const kept = <T extends object>(items: readonly T[]) => items.filter((item) => !written.has(item));
    const [puts, ends, closes] = [kept(tried), kept(triedEnds), kept(triedCloses)];
    if (puts.length + ends.length + closes.length === 0) return;
    // The last put of each key: a statement writes a row once.
    const p = [...new Map(puts.map((put) => [keyOf(put), put])).values()];
    // The circuits to close, `answered` when one end closing it was. A put that closes is written parked
    // like any wait behind the row, and made due by the unpark.
    const closing = new Map<string, CircuitKey & { answered: boolean }>();
    for (const e of [...ends, ...p, ...closes.map((c) => ({ ...c, closesCircuit: true }))]) {
      if (!e.closesCircuit) continue;
      const key = keyOf({ merchantId: e.merchantId, endpointId: e.endpointId });
      const answered = closing.get(key)?.answered === true || !('unanswered' in e && e.unanswered);
      closing.set(key, { merchantId: e.merchantId, endpointId: e.endpointId ?? '', answered });
    }
    const params = [
      ...keyParams('wait', p),
      p.map((w) => w.hand),
      p.map((w) => w.attempt),
      p.map((w) => w.delayMs),
      p.map((w) => w.reason),
      p.map((w) => JSON.stringify(w.headers)),
      p.map((w) => (w.hand === 0 ? (w.content ?? Buffer.alloc(0)).toString('hex') : null)),
      p.map((w) => w.spanLeftMs),
      p.map((w) => w.circuitMs ?? null),
      p.map((w) => w.probe === true),
      ...keyParams('wait', ends),
      ends.map((e) => e.hand),
      ...keyParams('circuit', [...closing.values()]),
    ];
    // A batch that opens or closes circuits locks every circuit row it touches first, in one order: two
    // batches each holding a row FOR SHARE (WRITE), then updating it (the opening's upsert, the close), deadlocked.
    const locks = closing.size > 0 || p.some((w) => w.circuitMs !== undefined)
      ? [...new Map([...p, ...closing.values()].map((k) => [keyOf({ merchantId: k.merchantId, endpointId: k.endpointId }), k])).values()]
      : [];
    await inIdentifiedTransaction(this.db, async (tx) => {
      if (locks.length > 0) await tx.query(LOCK_CIRCUITS, keyParams('circuit', locks));
      const { rows } = await tx.query<{ merchant_id: string; endpoint_id: string }>(WRITE, params);
      const circuits = rows.map((row) => ({ merchantId: row.merchant_id, endpointId: row.endpoint_id }));
      if (circuits.length > 0) await closeIn(tx, circuits, (c) => closing.get(keyOf(c))?.answered === true);
    }, (xid) => {
      for (const item of [...puts, ...ends, ...closes]) this.unsure.set(item, xid);
    });
  }

  /** What an earlier try committed with its answer lost: written again, a wait already ended was delivered twice. */
  private async committed(items: readonly object[]): Promise<Set<object>> {
    const xids = [...new Set(items.flatMap((item) => this.unsure.get(item) ?? []))];
    if (xids.length === 0) return new Set();
    const { rows } = await this.db.query<{ xid: string; status: string | null }>(XACT_STATUS, [xids]);
    // Throws while one is still in progress (its backend not yet aware).
    if (rows.some((row) => row.status === 'in progress')) throw new Error('an earlier try of this batch of waits is still in progress; tried again');
    const done = new Set(rows.filter((row) => row.status === 'committed').map((row) => row.xid));
    const written = new Set(items.filter((item) => done.has(this.unsure.get(item) ?? '')));
    for (const item of items) this.unsure.delete(item);
    return written;
  }

  /** Marks the rows closing, unanswered (no parked wait left to probe with); unparkClosed() makes their waits due. */
  async closeCircuits(circuits: readonly CircuitKey[]): Promise<void> {
    await closeIn(this.db, circuits, () => false);
  }

  /** Every open circuit's row, as announced (a listener's start: what it may have missed). */
  async openCircuits(db: Pick<Queryable, 'query'> = this.db): Promise<Array<Extract<CircuitState, { open: true }>>> {
    const { rows } = await db.query<{ merchant_id: string; endpoint_id: string; cooldown_ms: number | null; probe_in_ms: number }>(
      'SELECT merchant_id, endpoint_id, cooldown_ms, extract(epoch FROM probe_at - now()) * 1000 AS probe_in_ms FROM wait_circuits WHERE NOT closing',
    );
    return rows.map((row) => ({ merchantId: row.merchant_id, endpointId: row.endpoint_id, open: true, cooldownMs: row.cooldown_ms ?? undefined, probeInMs: Number(row.probe_in_ms) }));
  }

  /** One round of UNPARK: true when it made waits due or deleted the row (another round may). */
  async unparkClosed(limit: number, circuits: Among<CircuitKey> = {}): Promise<boolean> {
    const { rows } = await this.db.query<{ unparked: number; closed: number }>(UNPARK, [limit, ...amongParams('circuit', circuits)]);
    return rows[0]!.unparked > 0 || rows[0]!.closed > 0;
  }

  /** The keys of what an unpark, a probe or a pick PostgreSQL refused was to take, to be taken again apart. */
  async closingCircuits(limit: number, without: readonly CircuitKey[]): Promise<CircuitKey[]> {
    const text = `SELECT ${CIRCUIT_KEY} FROM wait_circuits WHERE closing AND ${among(2, 'circuit')} LIMIT $1`;
    return (await this.db.query<CircuitKey>(text, [limit, ...amongParams('circuit', { without })])).rows;
  }

  async probesDue(limit: number, without: readonly CircuitKey[]): Promise<CircuitKey[]> {
    const text = `SELECT ${CIRCUIT_KEY} FROM wait_circuits WHERE probe_at <= now() AND NOT closing AND ${among(2, 'circuit')} ORDER BY probe_at LIMIT $1`;
    return (await this.db.query<CircuitKey>(text, [limit, ...amongParams('circuit', { without })])).rows;
  }

  async due(limit: number, without: readonly WaitKey[]): Promise<WaitKey[]> {
    const text = `SELECT ${CIRCUIT_KEY}, webhook_id AS "webhookId" FROM webhook_waits WHERE pick_at <= now() AND ${among(2, 'wait')} ORDER BY pick_at LIMIT $1`;
    return (await this.db.query<WaitKey>(text, [limit, ...amongParams('wait', { without })])).rows;
  }

  /** By takeKey. An 'ended' one's wait is to end: a dispatcher killed after its place's end left it. */
  async take(takes: ReadonlyArray<WaitEnd & { again?: boolean }>, leaseMs: number): Promise<Map<string, 'taken' | 'spent' | 'ended'>> {
    const { rows } = await this.db.query<{ merchant_id: string; webhook_id: string; endpoint_id: string; hand: number; spent: boolean; ended: boolean }>(TAKE, [
      ...keyParams('wait', takes),
      takes.map((t) => t.hand),
      takes.map((t) => t.again === true),
      leaseMs,
      WAIT_TAKE_LIMIT,
    ]);
    return new Map(rows.map((row) => [takeKey({ merchantId: row.merchant_id, webhookId: row.webhook_id, endpointId: row.endpoint_id, hand: row.hand }), row.ended ? 'ended' : row.spent ? 'spent' : 'taken']));
  }

  /** A take given back untried (its dispatcher stopping) is not counted, while its hand is current and not spent. */
  async untake(take: WaitEnd): Promise<void> {
    await this.db.query(
      'UPDATE webhook_waits SET takes = takes - 1 WHERE merchant_id = $1 AND webhook_id = $2 AND endpoint_id = $3 AND hand = $4 AND takes > 0 AND pick_at IS NOT NULL',
      [take.merchantId, take.webhookId, take.endpointId ?? '', take.hand],
    );
  }

  /** Up to `limit` probes due, each with a lease; `idle`: circuits with no parked wait left, to be closed. */
  async probe(limit: number, leaseMs: number, circuits: Among<CircuitKey> = {}): Promise<{ handed: HandedWait[]; idle: CircuitKey[] }> {
    const rows = await this.leasing(PROBE, [limit, leaseMs, ...amongParams('circuit', circuits)], leaseMs);
    const idle = rows.filter((row) => row.webhook_id === null).map((row) => ({ merchantId: row.merchant_id, endpointId: row.endpoint_id ?? '' }));
    return { handed: handedOf(rows, true), idle };
  }

  /** Up to `limit` due waits, each with a lease; `parked` counts those parked instead. */
  async pick(limit: number, leaseMs: number, keys: Among<WaitKey> = {}): Promise<{ handed: HandedWait[]; parked: number }> {
    const rows = await this.leasing(PICK, [limit, leaseMs, ...amongParams('wait', keys)], leaseMs);
    const handed = handedOf(rows);
    return { handed, parked: rows.length - handed.length };
  }

  /** One committed with its answer lost handed nothing back: the next one releases its leases. */
  private async leasing(statement: string, params: unknown[], leaseMs: number): Promise<PickedRow[]> {
    const lost = this.lostPicks;
    this.lostPicks = [];
    let unsure: string[] = [];
    try {
      return await inIdentifiedTransaction(this.db, async (tx) => {
        if (lost.length > 0) await tx.query(RELEASE_LOST, [lost, leaseMs]);
        return (await tx.query<PickedRow>(statement, params)).rows;
      }, (xid) => (unsure = [xid]));
    } catch (err) {
      // Its release not done either: the ids it was given are kept, with its own.
      this.lostPicks = [...lost, ...unsure, ...this.lostPicks].slice(-LOST_PICKS_KEPT);
      throw err;
    }
  }

  /** A hand-back not confirmed is due again now, unless taken after all (take() moved the lease). */
  async unhand(wait: HandedWait): Promise<void> {
    await this.db.query(
      'UPDATE webhook_waits SET pick_at = now() WHERE merchant_id = $1 AND webhook_id = $2 AND endpoint_id = $5 AND hand = $3 AND pick_at = $4::timestamptz',
      [wait.merchantId, wait.webhookId, wait.hand, wait.leaseEnd, wait.endpointId ?? ''],
    );
  }

  /** Waiting now, and of those (not parked) past their due time by more than `overdueMs`. */
  async census(overdueMs: number): Promise<{ waiting: number; overdue: number }> {
    const { rows } = await this.db.query<{ waiting: number; overdue: number }>(
      `SELECT count(*)::integer AS waiting,
         -- An 'ordered' wait (no pick time) is due when the webhook before it ends: never overdue.
         count(*) FILTER (WHERE due_at < now() - $1::float8 * interval '1 millisecond' AND NOT parked AND pick_at IS NOT NULL)::integer AS overdue
       FROM webhook_waits`,
      [overdueMs],
    );
    return rows[0]!;
  }

  /** A merchant's waits (or everyone's), or one endpoint's, soonest due first: `webhooks waits list`. */
  async list(filter: { merchantId?: string; endpointId?: string; limit: number }): Promise<WaitRow[]> {
    const { rows } = await this.db.query<WaitRow>(
      `SELECT merchant_id, webhook_id, endpoint_id, attempt, reason, due_at, hand,
         CASE WHEN pick_at > due_at AND pick_at > now() AND NOT parked THEN pick_at END AS handed_until, parked, ${spent('webhook_waits')} AS spent
       FROM webhook_waits WHERE ($1::text IS NULL OR merchant_id = $1) AND ($3::text IS NULL OR endpoint_id = $3)
       ORDER BY due_at, merchant_id, webhook_id, endpoint_id LIMIT $2`,
      [filter.merchantId ?? null, filter.limit, filter.endpointId ?? null],
    );
    return rows;
  }
}

/** `unsure` is told the id of a transaction that failed otherwise than by a refused row: it may have committed. */
async function inIdentifiedTransaction<T>(db: Pick<Database, 'transaction'>, work: (tx: Queryable) => Promise<T>, unsure: (xid: string) => void): Promise<T> {
  let xid: string | undefined;
  try {
    return await db.transaction(async (tx) => {
      xid = (await tx.query<{ xid: string }>(`SELECT pg_current_xact_id()::text || '@' || ${RUN} AS xid`)).rows[0]!.xid;
      return work(tx);
    });
  } catch (err) {
    if (xid !== undefined && !isDataRefusal(err)) unsure(xid);
    throw err;
  }
}
