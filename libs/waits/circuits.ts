import type { Queryable } from '../delivery-store/index.js';

/** An endpoint's circuit is its row of wait_circuits; its opening and closing are announced (on commit) here. */
export const CIRCUIT_CHANNEL = 'wait_circuits';

export interface CircuitKey {
  merchantId: string;
  endpointId: string;
}

/** A circuit's row as announced or read by openCircuits(); `answered`: closed because its endpoint answered. */
export type CircuitState = CircuitKey & ({ open: true; cooldownMs?: number; probeInMs: number } | { open: false; answered: boolean });

/** A handed wait's bytes. */
export const CONTENT = `(SELECT b.content FROM webhook_bodies b WHERE b.merchant_id = w.merchant_id AND b.webhook_id = w.webhook_id AND b.endpoint_id = w.endpoint_id)`;

/** A wait's next hand, from one sequence for every row: a hand-back of an ended row matches no later row of its key. */
export const NEW_HAND = `nextval('webhook_wait_hands')`;

/** A key's columns, a circuit's or a wait's, and each one's field of the key ('' when absent). */
const KEY_COLUMNS = { circuit: ['merchant_id', 'endpoint_id'], wait: ['merchant_id', 'webhook_id', 'endpoint_id'] } as const;
export type Key = { merchantId: string; webhookId?: string; endpointId?: string };
const FIELDS = { merchant_id: (k: Key) => k.merchantId, webhook_id: (k: Key) => k.webhookId ?? '', endpoint_id: (k: Key) => k.endpointId ?? '' };

/** Only the rows keyed in the arrays from $n (all when NULL), never those keyed in the arrays after them. */
export function among(n: number, of: keyof typeof KEY_COLUMNS): string {
  const columns = KEY_COLUMNS[of];
  const arrays = (from: number) => columns.map((_, i) => `$${from + i}::text[]`).join(', ');
  return `($${n}::text[] IS NULL OR (${columns.join(', ')}) IN (SELECT * FROM unnest(${arrays(n)})))
    AND (${columns.join(', ')}) NOT IN (SELECT * FROM unnest(${arrays(n + columns.length)}))`;
}

/** Which rows a pick, probe or unpark may take (among's parameters: amongParams). */
export interface Among<K extends Key> {
  only?: readonly K[];
  without?: readonly K[];
}

export function amongParams(of: keyof typeof KEY_COLUMNS, { only, without = [] }: Among<Key>): Array<string[] | null> {
  return [...(only ? keyParams(of, only) : KEY_COLUMNS[of].map(() => null)), ...keyParams(of, without)];
}

/** The keys as unnest() parameters: one array per column of the key, in KEY_COLUMNS' order. */
export function keyParams(of: keyof typeof KEY_COLUMNS, keys: readonly Key[]): string[][] {
  return KEY_COLUMNS[of].map((column) => keys.map(FIELDS[column]));
}

/** One key as a string: what maps of keys are keyed by. */
export function keyOf(key: Key): string {
  return `${key.merchantId}\u001f${key.webhookId ?? ''}\u001f${key.endpointId ?? ''}`;
}

/** Each due circuit's oldest parked wait handed back as its probe; one with none left is returned to be closed. */
export const PROBE = `
WITH due AS (
  SELECT merchant_id, endpoint_id FROM wait_circuits WHERE probe_at <= now() AND NOT closing AND ${among(3, 'circuit')} ORDER BY probe_at LIMIT $1 FOR UPDATE SKIP LOCKED
), probe AS (
  SELECT w.merchant_id, w.webhook_id, w.endpoint_id FROM due CROSS JOIN LATERAL (
    SELECT merchant_id, webhook_id, endpoint_id FROM webhook_waits w
    WHERE w.merchant_id = due.merchant_id AND w.endpoint_id = due.endpoint_id AND w.parked ORDER BY w.due_at LIMIT 1 FOR UPDATE SKIP LOCKED
  ) w
), moved AS (
  UPDATE wait_circuits c SET probe_at = now() + $2::float8 * interval '1 millisecond' FROM probe
  WHERE c.merchant_id = probe.merchant_id AND c.endpoint_id = probe.endpoint_id
), handed AS (
  UPDATE webhook_waits w SET hand = ${NEW_HAND}, parked = false, pick_at = now() + $2::float8 * interval '1 millisecond'
  FROM probe p WHERE w.merchant_id = p.merchant_id AND w.webhook_id = p.webhook_id AND w.endpoint_id = p.endpoint_id
  RETURNING w.merchant_id, w.webhook_id, w.endpoint_id, w.hand, w.headers::text AS headers, w.pick_at::text AS lease_end, ${CONTENT} AS content
)
SELECT * FROM handed UNION ALL SELECT merchant_id, NULL, endpoint_id, NULL, NULL, NULL, NULL FROM due
  WHERE (merchant_id, endpoint_id) NOT IN (SELECT merchant_id, endpoint_id FROM probe)`;

/**
 * A closing circuit's parked waits made due again, up to $1, a postponed one at once. Paced, so a dead
 * endpoint's million do not all go first: a batch only fills the room its last ones (made due at the
 * row's probe_at) left. While some of them are unpicked, the batch tops them up at that same time, so
 * the count covers every row made due and not yet picked (a new time each batch counted the last
 * batch alone, and rounds after a partial pick made them all due). The row goes once none is left;
 * nothing parks behind a closing row.
 */
export const UNPARK = `
WITH c AS (
  SELECT x.merchant_id, x.endpoint_id, $1 - d.unpicked AS room, CASE WHEN d.unpicked > 0 THEN x.probe_at ELSE now() END AS stamp
  FROM wait_circuits x CROSS JOIN LATERAL (
    -- A filter, not a condition of the scan: a dead merchant's million rows are not read.
    SELECT count(*) FILTER (WHERE w.merchant_id = x.merchant_id AND w.endpoint_id = x.endpoint_id) AS unpicked FROM webhook_waits w
    WHERE w.pick_at = x.probe_at AND w.pick_at <= now()
  ) d
  WHERE x.closing AND d.unpicked < $1 AND ${among(2, 'circuit')} LIMIT 1 FOR UPDATE OF x SKIP LOCKED
), batch AS (
  SELECT w.merchant_id, w.webhook_id, w.endpoint_id FROM c CROSS JOIN LATERAL (
    SELECT x.merchant_id, x.webhook_id, x.endpoint_id FROM webhook_waits x
    WHERE x.merchant_id = c.merchant_id AND x.endpoint_id = c.endpoint_id AND x.parked ORDER BY x.due_at LIMIT c.room FOR UPDATE SKIP LOCKED
  ) w
), unparked AS (
  UPDATE webhook_waits w SET parked = false,
    due_at = CASE WHEN w.reason = 'circuit-open' THEN LEAST(w.due_at, now()) ELSE w.due_at END,
    pick_at = CASE WHEN w.reason = 'circuit-open' OR w.due_at <= now() THEN c.stamp ELSE w.due_at END
  FROM batch b, c
  WHERE w.merchant_id = b.merchant_id AND w.webhook_id = b.webhook_id AND w.endpoint_id = b.endpoint_id
  RETURNING 1
), rest AS (
  SELECT EXISTS (SELECT 1 FROM webhook_waits w JOIN c USING (merchant_id, endpoint_id) WHERE w.parked AND w.webhook_id NOT IN (SELECT webhook_id FROM batch)) AS parked
), paced AS (
  UPDATE wait_circuits x SET probe_at = c.stamp FROM c, rest WHERE x.merchant_id = c.merchant_id AND x.endpoint_id = c.endpoint_id AND rest.parked
), closed AS (
  DELETE FROM wait_circuits x USING c, rest WHERE x.merchant_id = c.merchant_id AND x.endpoint_id = c.endpoint_id AND NOT rest.parked
  RETURNING 1
)
SELECT (SELECT count(*) FROM unparked)::integer AS unparked, (SELECT count(*) FROM closed)::integer AS closed`;

/** A CIRCUIT_CHANNEL payload, or undefined for one that is not. */
export function circuitOfPayload(payload: string): CircuitState | undefined {
  try {
    const { m, e, open, answered, cooldown, probe } = JSON.parse(payload) as Record<string, unknown>;
    if (typeof m !== 'string' || typeof e !== 'string') return undefined;
    if (open === true) return { merchantId: m, endpointId: e, open, cooldownMs: typeof cooldown === 'number' ? cooldown : undefined, probeInMs: typeof probe === 'number' ? probe : 0 };
    return open === false ? { merchantId: m, endpointId: e, open, answered: answered === true } : undefined;
  } catch {
    return undefined;
  }
}

/** Marks the circuits closing, in the caller's transaction, each close announced on commit. */
export async function closeIn(tx: Queryable, circuits: readonly CircuitKey[], answered: (circuit: CircuitKey) => boolean): Promise<void> {
  await tx.query(
    `UPDATE wait_circuits c SET closing = true FROM unnest($1::text[], $2::text[], $3::boolean[]) AS x(m, e, a) WHERE c.merchant_id = x.m AND c.endpoint_id = x.e AND NOT c.closing
     RETURNING pg_notify('${CIRCUIT_CHANNEL}', json_build_object('m', c.merchant_id, 'e', c.endpoint_id, 'open', false, 'answered', x.a)::text)`,
    [...keyParams('circuit', circuits), circuits.map(answered)],
  );
}
