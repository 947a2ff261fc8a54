import type { Queryable } from '../delivery-store/index.js';
import type { Endpoint, Merchant } from './schema.js';

/**
 * An endpoint's failing clock (auto-disable), one row of endpoint_health per endpoint: writing it
 * changes no merchant version and makes no program read settings or secrets again. `url` is the
 * URL it was measured on: a clock of a URL the endpoint no longer has counts for nothing. A
 * cleared clock keeps its row, with `failing_since` null, so that the poll sees the clearing.
 */
export interface Health {
  /** Absent in a clock a caller names by its URL (recordHealth finds the id). */
  endpointId?: string;
  url: string;
  failingSince: string;
  lastFailureAt?: string;
}

export interface HealthRow {
  merchant_id: string;
  endpoint_id: string;
  url: string;
  failing_since: Date | string | null;
  last_failure_at: Date | string | null;
}

export const HEALTH_COLUMNS = 'merchant_id, endpoint_id, url, failing_since, last_failure_at';

const iso = (value: Date | string | null): string | undefined => (value === null ? undefined : new Date(value).toISOString());

export function healthOf(row: HealthRow): Health | undefined {
  const failingSince = iso(row.failing_since);
  if (failingSince === undefined) return undefined;
  const lastFailureAt = iso(row.last_failure_at);
  return { endpointId: row.endpoint_id, url: row.url, failingSince, ...(lastFailureAt ? { lastFailureAt } : {}) };
}

/** The merchant as programs see it: each endpoint with its own clock, if one runs (measured on the URL it has now). */
export function withHealth(merchant: Merchant, clocks: Iterable<Health> | undefined): Merchant {
  if (!clocks) return merchant;
  const byEndpoint = new Map<string, Health>();
  for (const clock of clocks) if (clock.endpointId !== undefined) byEndpoint.set(clock.endpointId, clock);
  const clockOf = (endpoint: Endpoint) => {
    const clock = byEndpoint.get(endpoint.id);
    return clock && clock.url === endpoint.url ? clock : undefined;
  };
  if (!merchant.endpoints.some(clockOf)) return merchant;
  const endpoints = merchant.endpoints.map((endpoint) => {
    const health = clockOf(endpoint);
    if (!health) return endpoint;
    // Copied by descriptor: a secret not opened yet (the API) stays unopened.
    const merged = Object.defineProperties({}, Object.getOwnPropertyDescriptors(endpoint)) as Endpoint;
    merged.failingSince = health.failingSince;
    if (health.lastFailureAt) merged.lastFailureAt = health.lastFailureAt;
    return merged;
  });
  return { ...merchant, endpoints };
}

/** The clock fields taken off: the merchant as its row holds it. */
export function withoutHealth(merchant: Merchant): Merchant {
  if (!merchant.endpoints.some((endpoint) => endpoint.failingSince !== undefined || endpoint.lastFailureAt !== undefined)) return merchant;
  const endpoints = merchant.endpoints.map((endpoint) => {
    const bare = Object.defineProperties({}, Object.getOwnPropertyDescriptors(endpoint)) as Endpoint;
    delete bare.failingSince;
    delete bare.lastFailureAt;
    return bare;
  });
  return { ...merchant, endpoints };
}

/**
 * Writes the clock of the merchant's endpoint at `url` from `seen` to `next` (undefined: cleared),
 * only while that endpoint is enabled at that URL and its clock is still `seen` (a clear: still the
 * clock that started then): of dispatchers racing, one writes. The row locked for share orders it with a settings write. Returns the
 * endpoint's id when it wrote.
 */
export async function writeHealth(tx: Queryable, merchantId: string, url: string, seen: Health | undefined, next: Health | undefined): Promise<string | undefined> {
  const { rows: owner } = await tx.query<{ id: string | null; enabled: boolean | null }>(
    `SELECT e->>'id' AS id, (e->>'enabled')::boolean AS enabled FROM merchants m, jsonb_array_elements(m.endpoints) e WHERE m.id = $1 AND e->>'url' = $2 FOR SHARE OF m`,
    [merchantId, url],
  );
  const endpointId = owner[0]?.id;
  if (!owner[0]?.enabled || !endpointId) return undefined;
  const { rows: held } = await tx.query<HealthRow>(`SELECT ${HEALTH_COLUMNS} FROM endpoint_health WHERE merchant_id = $1 AND endpoint_id = $2 FOR UPDATE`, [merchantId, endpointId]);
  const current = held[0] && healthOf(held[0]);
  const running = current && current.url === url ? current : undefined;
  // A clear needs only the same clock (its start): another dispatcher's refresh of its last failure
  // since must not drop a success seen here, or the endpoint could be disabled after it.
  if (running?.failingSince !== seen?.failingSince || (next !== undefined && running?.lastFailureAt !== seen?.lastFailureAt)) return undefined;
  await tx.query(
    `INSERT INTO endpoint_health (merchant_id, endpoint_id, url, failing_since, last_failure_at) VALUES ($1, $2, $3, $4, $5)
     ON CONFLICT (merchant_id, endpoint_id) DO UPDATE SET url = EXCLUDED.url, failing_since = EXCLUDED.failing_since, last_failure_at = EXCLUDED.last_failure_at, change_xid = pg_current_xact_id()`,
    [merchantId, endpointId, url, next?.failingSince ?? null, next?.lastFailureAt ?? null],
  );
  return endpointId;
}

/** Clears the clocks of these endpoints (a settings write that turned one off or on, or pointed it elsewhere). */
export async function clearHealth(tx: Queryable, merchantId: string, endpointIds: readonly string[]): Promise<void> {
  await tx.query(
    'UPDATE endpoint_health SET failing_since = NULL, last_failure_at = NULL, change_xid = pg_current_xact_id() WHERE merchant_id = $1 AND endpoint_id = ANY($2::text[]) AND failing_since IS NOT NULL',
    [merchantId, endpointIds],
  );
}
