import { erasedMerchantSql, type Queryable } from '../delivery-store/index.js';
import { respaceThrottled } from '../waits/index.js';

/** The lowest adaptive rate; it changes at most once a second: a burst of 429s in flight halves it once. */
export const MIN_ADAPTIVE_RATE = 0.5;
/** How much a second of successes raises a lowered rate (and at least one per second). */
export const RAISE_FACTOR = 1.1;

export interface EndpointRate {
  /** Per second. */
  rate: number;
  /** This call changed it, from `previous` (undefined: no row). */
  changed?: true;
  previous?: number;
  /** Where it goes back to, and the row with it. */
  ceiling: number;
}

interface RatedView {
  id: string;
  maxPerSecond: number | null;
  currentPerSecond: number | null;
}

/** Merchants' views with each endpoint's rate now, from one query; unchanged when PostgreSQL does not answer. */
export async function withCurrentRates<V extends { id: string; endpoints: RatedView[] }>(db: Queryable, views: V[]): Promise<V[]> {
  if (views.every((view) => view.endpoints.length === 0)) return views;
  const { rows } = await db
    .query<{ merchant_id: string; endpoint_id: string; rate: number }>('SELECT merchant_id, endpoint_id, rate FROM endpoint_rates WHERE merchant_id = ANY($1::text[])', [views.map((view) => view.id)])
    .catch(() => ({ rows: [] }));
  if (rows.length === 0) return views;
  const rates = new Map(rows.map((row) => [`${row.merchant_id}\u001f${row.endpoint_id}`, Number(row.rate)]));
  return views.map((view) => ({
    ...view,
    endpoints: view.endpoints.map((endpoint) => {
      const rate = rates.get(`${view.id}\u001f${endpoint.id}`);
      return rate === undefined ? endpoint : { ...endpoint, currentPerSecond: currentPerSecondOf(endpoint.maxPerSecond, rate) };
    }),
  }));
}

export async function withCurrentRate<V extends { id: string; endpoints: RatedView[] }>(db: Queryable, view: V): Promise<V> {
  return (await withCurrentRates(db, [view]))[0]!;
}

export async function withEndpointRates<E extends RatedView>(db: Queryable, merchantId: string, endpoints: E[]): Promise<E[]> {
  return (await withCurrentRate(db, { id: merchantId, endpoints })).endpoints;
}

/** To the hundredth, never above maxPerSecond. */
function currentPerSecondOf(maxPerSecond: number | null | undefined, adaptiveRate: number): number {
  return Math.round(Math.min(maxPerSecond ?? Infinity, adaptiveRate) * 100) / 100;
}

export async function endpointRateOf(db: Queryable, merchantId: string, endpointId: string): Promise<EndpointRate | undefined> {
  const { rows } = await db.query<{ rate: number; ceiling: number }>('SELECT rate, ceiling FROM endpoint_rates WHERE merchant_id = $1 AND endpoint_id = $2', [merchantId, endpointId]);
  return rows[0] && { rate: Number(rows[0].rate), ceiling: Number(rows[0].ceiling) };
}

/** Every lowered endpoint's rate (only endpoints slowed now have one), at most `limit`. */
export async function endpointRates(db: Queryable, limit: number): Promise<Array<{ merchantId: string; endpointId: string } & EndpointRate>> {
  const { rows } = await db.query<{ merchant_id: string; endpoint_id: string; rate: number; ceiling: number }>(
    'SELECT merchant_id, endpoint_id, rate, ceiling FROM endpoint_rates ORDER BY changed_at DESC LIMIT $1',
    [limit],
  );
  return rows.map((row) => ({ merchantId: row.merchant_id, endpointId: row.endpoint_id, rate: Number(row.rate), ceiling: Number(row.ceiling) }));
}

/**
 * The endpoint answered 429 or 503: its rate is halved, at most once a second, from `sentAt` at first
 * (or `maxPerSecond` when lower). None for a deleted endpoint or merchant: nothing would raise it again.
 */
export async function lowerEndpointRate(db: Queryable, merchantId: string, sentAt: number, ceiling: number, endpointId: string, maxPerSecond?: number): Promise<EndpointRate> {
  const { rows } = await db.query<{ rate: number; ceiling: number }>(
    `WITH owner AS (SELECT m.endpoints @> jsonb_build_array(jsonb_build_object('id', $2::text)) AS holds FROM merchants m WHERE m.id = $1 FOR SHARE),
     prior AS (SELECT rate FROM endpoint_rates WHERE merchant_id = $1 AND endpoint_id = $2),
     changed AS (
       INSERT INTO endpoint_rates AS e (merchant_id, endpoint_id, rate, ceiling, lowered_at) SELECT $1::text, $2::text, GREATEST($3::float8, $4::float8 / 2), $5::float8, now()
       WHERE COALESCE((SELECT holds FROM owner), NOT EXISTS (SELECT 1 FROM merchants WHERE id = $1) AND NOT ${erasedMerchantSql('$1::text')})
       ON CONFLICT (merchant_id, endpoint_id) DO UPDATE SET rate = GREATEST($3::float8, LEAST(e.rate, $6::float8) / 2), changed_at = now(), lowered_at = now()
       WHERE COALESCE(e.lowered_at, e.changed_at) < now() - interval '1 second'
       RETURNING rate, ceiling
     )
     SELECT rate, ceiling, true AS changed, (SELECT rate FROM prior) AS previous FROM changed UNION ALL
     SELECT rate, ceiling, false, NULL FROM endpoint_rates WHERE merchant_id = $1 AND endpoint_id = $2 AND NOT EXISTS (SELECT 1 FROM changed)`,
    [merchantId, endpointId, MIN_ADAPTIVE_RATE, sentAt, Math.max(MIN_ADAPTIVE_RATE, ceiling), maxPerSecond ?? 'Infinity'],
  );
  const row = rows[0] as { rate: number; ceiling: number; changed: boolean; previous: number | null } | undefined;
  // No row: another call inserted it after this statement's snapshot (or the merchant is deleted).
  if (!row) return (await endpointRateOf(db, merchantId, endpointId)) ?? { rate: Math.max(MIN_ADAPTIVE_RATE, sentAt / 2), ceiling: Math.max(MIN_ADAPTIVE_RATE, ceiling) };
  return { rate: Number(row.rate), ceiling: Number(row.ceiling), ...(row.changed ? { changed: true, previous: row.previous === null ? undefined : Number(row.previous) } : {}) };
}

/** The endpoint succeeds: a lowered rate is raised, at most once a second; back at its ceiling the row goes. */
export async function raiseEndpointRate(db: Queryable, merchantId: string, endpointId: string): Promise<(EndpointRate & { gone?: true }) | undefined> {
  const { rows } = await db.query<{ rate: number; ceiling: number; gone: boolean; previous: number }>(
    `WITH prior AS (SELECT rate FROM endpoint_rates WHERE merchant_id = $1 AND endpoint_id = $2),
     gone AS (
       DELETE FROM endpoint_rates WHERE merchant_id = $1 AND endpoint_id = $2
         AND GREATEST(rate * $3::float8, rate + 1) >= ceiling AND changed_at < now() - interval '1 second'
       RETURNING rate, ceiling
     ), raised AS (
       UPDATE endpoint_rates SET rate = GREATEST(rate * $3::float8, rate + 1), changed_at = now()
       WHERE merchant_id = $1 AND endpoint_id = $2 AND changed_at < now() - interval '1 second' AND NOT EXISTS (SELECT 1 FROM gone)
       RETURNING rate, ceiling
     )
     SELECT rate, ceiling, true AS gone, rate AS previous FROM gone UNION ALL SELECT rate, ceiling, false, (SELECT rate FROM prior) FROM raised`,
    [merchantId, endpointId, RAISE_FACTOR],
  );
  if (rows[0]?.gone) return { rate: Number(rows[0].ceiling), ceiling: Number(rows[0].ceiling), changed: true, previous: Number(rows[0].rate), gone: true };
  if (rows[0]) return { rate: Number(rows[0].rate), ceiling: Number(rows[0].ceiling), changed: true, previous: Number(rows[0].previous) };
  return endpointRateOf(db, merchantId, endpointId);
}

/** A raised limit's queue comes back this long after the write: the time the dispatchers have to hear of it. */
export const LIMIT_HEARD_MS = 1_000;

/** In the write's transaction: the queue is spread to the new rate here once, not in each dispatcher. */
export async function respaceForLimit(tx: Queryable, merchantId: string, endpointId: string, before: number | undefined, after: number | undefined): Promise<void> {
  const adaptive = (await endpointRateOf(tx, merchantId, endpointId))?.rate ?? Infinity;
  await respaceThrottled(tx, merchantId, endpointId, Math.min(before ?? Infinity, adaptive), Math.min(after ?? Infinity, adaptive), LIMIT_HEARD_MS);
  // A lowered rate goes back up to the new limit, not the old one. Unset, the old limit stays its ceiling.
  if (after !== undefined && adaptive !== Infinity) {
    await tx.query('UPDATE endpoint_rates SET ceiling = $3 WHERE merchant_id = $1 AND endpoint_id = $2', [merchantId, endpointId, after]);
  }
}

/** In the delete's transaction: nothing would ever raise them again, and every dispatcher reads them. */
export async function dropEndpointRates(tx: Queryable, merchantId: string, endpointIds: readonly string[]): Promise<void> {
  await tx.query('DELETE FROM endpoint_rates WHERE merchant_id = $1 AND endpoint_id = ANY($2::text[])', [merchantId, endpointIds]);
}
