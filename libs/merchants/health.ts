import type { Queryable } from '../delivery-store/index.js';
import type { Endpoint, Merchant } from './schema.js';

/** A failing clock, measured on `url`; a cleared one keeps its row, so that the poll sees the clearing. */
export type Health = { endpointId: string } & Required<Pick<Endpoint, 'url' | 'failingSince'>> &
  Pick<Endpoint, 'lastFailureAt'>;

export interface HealthRow {
  merchant_id: string;
  endpoint_id: string;
  url: string;
  failing_since: Date | string | null;
  last_failure_at: Date | string | null;
}

export const HEALTH_COLUMNS = 'merchant_id, endpoint_id, url, failing_since, last_failure_at';

const CLEARED = 'failing_since = NULL, last_failure_at = NULL';

const iso = (value: Date | string | null): string | undefined => (value === null ? undefined : new Date(value).toISOString());

export function healthOf(row: HealthRow): Health | undefined {
  const failingSince = iso(row.failing_since);
  if (failingSince === undefined) return undefined;
  const lastFailureAt = iso(row.last_failure_at);
  return { endpointId: row.endpoint_id, url: row.url, failingSince, ...(lastFailureAt ? { lastFailureAt } : {}) };
}

/** Each endpoint with its own clock, if one runs on the URL it has now, and no other. */
export function withHealth(merchant: Merchant, clocks: Iterable<Health> = []): Merchant {
  const byEndpoint = new Map([...clocks].map((clock) => [clock.endpointId, clock]));
  let changed = false;
  const endpoints = merchant.endpoints.map((endpoint) => {
    const clock = byEndpoint.get(endpoint.id);
    const health = clock?.url === endpoint.url ? clock : undefined;
    if (endpoint.failingSince === health?.failingSince && endpoint.lastFailureAt === health?.lastFailureAt) return endpoint;
    changed = true;
    // Copied by descriptor: a secret not opened yet (the API) stays unopened.
    const merged = Object.defineProperties({}, Object.getOwnPropertyDescriptors(endpoint)) as Endpoint;
    delete merged.failingSince;
    delete merged.lastFailureAt;
    if (health) merged.failingSince = health.failingSince;
    if (health?.lastFailureAt) merged.lastFailureAt = health.lastFailureAt;
    return merged;
  });
  return changed ? { ...merchant, endpoints } : merchant;
}

/** Durations a dispatcher measured: the clock moves by PostgreSQL's `now()` alone. */
export type HealthFact = { kind: 'failing'; streakMs: number; afterMs: number } | { kind: 'succeeded'; agoMs: number };

/** While the endpoint is enabled at `url`. The row locks order it with a settings write and racing dispatchers. */
export async function writeHealth(tx: Queryable, merchantId: string, url: string, fact: HealthFact) {
  const { rows: owner } = await tx.query<{ id: string | null; enabled: boolean | null; now: Date }>(
    `SELECT e->>'id' AS id, (e->>'enabled')::boolean AS enabled, now() AS now FROM merchants m, jsonb_array_elements(m.endpoints) e WHERE m.id = $1 AND e->>'url' = $2 FOR SHARE OF m`,
    [merchantId, url],
  );
  const endpointId = owner[0]?.id;
  if (!owner[0]?.enabled || !endpointId) return undefined;
  const now = new Date(owner[0].now);
  const one = `FROM endpoint_health WHERE merchant_id = $1 AND endpoint_id = $2`;
  const { rows: held } = await tx.query<HealthRow>(`SELECT ${HEALTH_COLUMNS} ${one} FOR UPDATE`, [merchantId, endpointId]);
  const found = held[0] && healthOf(held[0]);
  const current = found && found.url === url ? found : undefined;
  const as = (rows: HealthRow[]) => ({ endpointId, clock: rows[0] && healthOf(rows[0]), now, wrote: rows.length > 0 });
  const update = async (set: string) => {
    const { rows } = await tx.query<HealthRow>(
      `UPDATE endpoint_health SET ${set}, change_xid = pg_current_xact_id() WHERE merchant_id = $1 AND endpoint_id = $2 RETURNING ${HEALTH_COLUMNS}`,
      [merchantId, endpointId],
    );
    return as(rows);
  };
  if (fact.kind === 'succeeded') {
    if (!current || Date.parse(current.failingSince) > now.getTime() - fact.agoMs) return { endpointId, clock: current, now, wrote: false };
    return update(CLEARED);
  }
  // Running, not stale (the rule of clockState in libs/operational).
  const lastFailure = current && Math.max(Date.parse(current.failingSince), Date.parse(current.lastFailureAt ?? current.failingSince));
  if (current && now.getTime() - lastFailure! <= fact.afterMs / 5) return update('last_failure_at = now()');
  // A flapping endpoint writes nothing: a clock starts only from a tenth of failures.
  if (fact.streakMs * 10 < fact.afterMs) return { endpointId, clock: undefined, now, wrote: false };
  // A row that was not there when read may have been made since by another dispatcher: its clock is kept.
  const { rows } = await tx.query<HealthRow>(
    `INSERT INTO endpoint_health (merchant_id, endpoint_id, url, failing_since, last_failure_at) VALUES ($1, $2, $3, now() - $4::bigint * interval '1 millisecond', now())
     ON CONFLICT (merchant_id, endpoint_id) DO UPDATE SET url = EXCLUDED.url, failing_since = EXCLUDED.failing_since, last_failure_at = EXCLUDED.last_failure_at, change_xid = pg_current_xact_id()
     WHERE $5
     RETURNING ${HEALTH_COLUMNS}`,
    [merchantId, endpointId, url, Math.round(fact.streakMs), held.length > 0],
  );
  if (rows.length > 0) return as(rows);
  const { rows: made } = await tx.query<HealthRow>(`SELECT ${HEALTH_COLUMNS} ${one}`, [merchantId, endpointId]);
  return { ...as(made), wrote: false };
}

/** For a settings write that turned an endpoint off or on, or pointed it elsewhere. */
export async function clearHealth(tx: Queryable, merchantId: string, endpointIds: readonly string[]): Promise<void> {
  await tx.query(
    `UPDATE endpoint_health SET ${CLEARED}, change_xid = pg_current_xact_id() WHERE merchant_id = $1 AND endpoint_id = ANY($2::text[]) AND failing_since IS NOT NULL`,
    [merchantId, endpointIds],
  );
}
