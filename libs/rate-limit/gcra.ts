import type { Queryable } from '../delivery-store/index.js';

/** A key's bucket is one `tat` (theoretical arrival time) in `rate_limits`, on PostgreSQL's clock. */
interface GcraLimit {
  intervalMs: number;
  /** How far `tat` may run ahead of now after a take: `burst × intervalMs` lets `burst` cells go at once. */
  burstMs: number;
  /** How far ahead a cell may be granted (default 0): the taker holds it `inMs`, until it conforms. */
  aheadMs?: number;
  /** The cell is not wanted before this many ms from now (its slot starts there at the earliest). */
  notBeforeMs?: number;
  /** Cells taken at once, one interval apart (default 1): all of them or none. */
  count?: number;
  /** Refused while this other key's `tat` is more than `withinMs` ahead of now: a line the cell may not go ahead of. */
  behind?: { key: string; withinMs: number };
}

/** Granted: the first cell conforms `inMs` from the statement's start, which took `tookMs`; `behind`: the other key's line refused it. */
type GcraAnswer = { ok: true; inMs: number; tookMs: number } | { ok: false; retryInMs: number; behind?: true };

/** One statement: moves `tat` only when the cell fits, and reads the `tat` found, so a refusal says when to come back. */
const TAKE = `
WITH prior AS (SELECT tat FROM rate_limits WHERE key = $1),
ahead AS (SELECT tat FROM rate_limits WHERE key = $6 AND tat > now() + $7::float8 * interval '1 millisecond'),
taken AS (
  INSERT INTO rate_limits AS r (key, tat) SELECT $1, now() + ($5::float8 + $2::float8) * interval '1 millisecond' WHERE NOT EXISTS (SELECT 1 FROM ahead)
  ON CONFLICT (key) DO UPDATE SET tat = GREATEST(r.tat, now() + $5::float8 * interval '1 millisecond') + $2::float8 * interval '1 millisecond'
  WHERE GREATEST(r.tat, now() + $5::float8 * interval '1 millisecond') + $2::float8 * interval '1 millisecond' <= now() + ($3::float8 + $4::float8) * interval '1 millisecond'
    AND NOT EXISTS (SELECT 1 FROM ahead)
  RETURNING tat
)
SELECT (SELECT EXTRACT(EPOCH FROM (tat - now())) * 1000 FROM taken)::float8 AS granted_ms,
       (SELECT EXTRACT(EPOCH FROM (tat - now())) * 1000 FROM prior)::float8 AS prior_ms,
       (SELECT EXTRACT(EPOCH FROM (tat - now())) * 1000 FROM ahead)::float8 AS ahead_ms,
       (EXTRACT(EPOCH FROM (clock_timestamp() - now())) * 1000)::float8 AS took_ms`;

export async function takeCell(db: Queryable, key: string, limit: GcraLimit): Promise<GcraAnswer> {
  const ahead = limit.aheadMs ?? 0;
  const notBefore = Math.max(0, limit.notBeforeMs ?? 0);
  const cost = limit.intervalMs * (limit.count ?? 1);
  const { behind } = limit;
  const { rows } = await db.query<{ granted_ms: number | null; prior_ms: number | null; ahead_ms: number | null; took_ms: number }>(TAKE, [key, cost, limit.burstMs, ahead, notBefore, behind?.key ?? null, behind?.withinMs ?? 0]);
  const row = rows[0]!;
  // The last cell conforms at the new tat less the burst; the first, count - 1 intervals before it.
  if (row.granted_ms !== null) return { ok: true, inMs: Math.max(0, Number(row.granted_ms) - limit.burstMs - (cost - limit.intervalMs)), tookMs: Number(row.took_ms) };
  // Refused: the cells fit once tat + their cost is within burst + ahead of now.
  const prior = Number(row.prior_ms ?? 0);
  const retryInMs = Math.max(1, Math.max(prior, notBefore) + cost - limit.burstMs - ahead);
  if (row.ahead_ms === null) return { ok: false, retryInMs };
  return { ok: false, retryInMs: Math.max(retryInMs, Number(row.ahead_ms) - behind!.withinMs), behind: true };
}

/** A cell granted for what was then refused, given back (a tat behind now is a full bucket). */
export async function returnCell(db: Queryable, key: string, intervalMs: number): Promise<void> {
  await db.query("UPDATE rate_limits SET tat = tat - $2::float8 * interval '1 millisecond' WHERE key = $1", [key, intervalMs]);
}

/** The limit's rate changed: what `key` granted ahead of now is `factor` times as far. */
export async function stretchCells(db: Queryable, key: string, factor: number): Promise<void> {
  await db.query("UPDATE rate_limits SET tat = now() + (tat - now()) * $2::float8 WHERE key = $1 AND tat > now()", [key, factor]);
}

/** Keys whose bucket is full again hold nothing worth keeping. */
export async function sweepCells(db: Queryable): Promise<void> {
  await db.query("DELETE FROM rate_limits WHERE tat < now() - interval '1 minute'");
}
