-- webhook_order_step() of 0022, with one change: a new copy of a webhook that already waits with no
-- place in its line (a retry written before its endpoint ordered, a throttled or deferred first
-- attempt of then) takes no place. It answered 'waiting' (its wait carries it) and took a place
-- that nothing ended: the wait's hand-back is not stepped, so it does not end a place, and the
-- upkeep does not release a place whose webhook waits; every later webhook of its reference waited
-- for ever (test/integration/order-foreign-wait.test.ts). Such a copy now finds no place (a left
-- join) and answers 'waiting' as before, writing nothing.
-- Replaces a function only: the programs of 0026 run on it unchanged.
-- runs with releases from: 0026
CREATE OR REPLACE FUNCTION webhook_order_step(
  a_merchants text[], a_endpoints text[], a_keys text[], a_webhooks text[], a_headers text[], a_contents text[],
  e_merchants text[], e_endpoints text[], e_webhooks text[], keep_ms float8
) RETURNS TABLE (admitted_merchant text, admitted_endpoint text, admitted text, state text) LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
#variable_conflict use_column
DECLARE
  ended_merchants text[];
  ended_endpoints text[];
  ended_keys text[];
  held_merchants text[];
  held_endpoints text[];
  held_keys text[];
  stale boolean;
  head record;
BEGIN
  SELECT array_agg(o.merchant_id), array_agg(o.endpoint_id), array_agg(o.order_key), bool_or(o.ended_at < now() - keep_ms * interval '1 millisecond')
  INTO held_merchants, held_endpoints, held_keys, stale
  FROM unnest(a_merchants, a_endpoints, a_webhooks) AS a(m, p, w) CROSS JOIN LATERAL (
    SELECT x.merchant_id, x.endpoint_id, x.order_key, x.ended_at FROM webhook_order x WHERE x.merchant_id = a.m AND x.endpoint_id = a.p AND x.webhook_id = a.w OFFSET 0
  ) o;
  SELECT array_agg(o.merchant_id), array_agg(o.endpoint_id), array_agg(o.order_key) INTO ended_merchants, ended_endpoints, ended_keys
  FROM unnest(e_merchants, e_endpoints, e_webhooks) AS e(m, p, w) CROSS JOIN LATERAL (
    SELECT x.merchant_id, x.endpoint_id, x.order_key FROM webhook_order x WHERE x.merchant_id = e.m AND x.endpoint_id = e.p AND x.webhook_id = e.w OFFSET 0
  ) o;
  PERFORM pg_advisory_xact_lock(l.k) FROM (
    SELECT DISTINCT hashtextextended(s.m || E'\x1f' || s.p || E'\x1f' || s.k, 55) AS k
    FROM (SELECT * FROM unnest(a_merchants, a_endpoints, a_keys) UNION ALL SELECT * FROM unnest(held_merchants, held_endpoints, held_keys)
      UNION ALL SELECT * FROM unnest(ended_merchants, ended_endpoints, ended_keys)) AS s(m, p, k)
    ORDER BY 1
  ) l;

  IF ended_merchants IS NOT NULL THEN
    UPDATE webhook_order SET ended_at = now() WHERE ctid = ANY (ARRAY(
      SELECT o.ctid FROM unnest(e_merchants, e_endpoints, e_webhooks) AS e(m, p, w) CROSS JOIN LATERAL (
        SELECT x.ctid FROM webhook_order x WHERE x.merchant_id = e.m AND x.endpoint_id = e.p AND x.webhook_id = e.w OFFSET 0
      ) o));
    FOR head IN
      SELECT g.m, g.p, h.webhook_id AS w
      FROM (SELECT DISTINCT g.m, g.p, g.k FROM unnest(ended_merchants, ended_endpoints, ended_keys) AS g(m, p, k)) g
      CROSS JOIN LATERAL (
        SELECT o.webhook_id FROM webhook_order o
        WHERE o.merchant_id = g.m AND o.endpoint_id = g.p AND o.order_key = g.k AND o.ended_at IS NULL ORDER BY o.seq LIMIT 1
      ) h
    LOOP
      UPDATE webhook_waits w SET pick_at = now(), due_at = now(),
        headers = jsonb_set(w.headers, '{x-first-seen-at}', to_jsonb(to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')))
      WHERE w.merchant_id = head.m AND w.webhook_id = head.w AND w.endpoint_id = head.p AND w.reason = 'ordered' AND w.pick_at IS NULL;
    END LOOP;
    DELETE FROM webhook_order WHERE ctid = ANY (ARRAY(
      SELECT x.ctid FROM webhook_order x WHERE x.ended_at < now() - keep_ms * interval '1 millisecond'
      ORDER BY x.ended_at LIMIT 2 * cardinality(e_webhooks) FOR UPDATE SKIP LOCKED));
  END IF;

  IF cardinality(a_webhooks) = 0 THEN RETURN; END IF;

  -- An admitted webhook's own row ended longer than keep_ms ago is gone, swept or not: its copy is a new webhook.
  IF stale THEN
    DELETE FROM webhook_order WHERE ctid = ANY (ARRAY(
      SELECT o.ctid FROM unnest(a_merchants, a_endpoints, a_webhooks) AS a(m, p, w) CROSS JOIN LATERAL (
        SELECT x.ctid FROM webhook_order x
        WHERE x.merchant_id = a.m AND x.endpoint_id = a.p AND x.webhook_id = a.w AND x.ended_at < now() - keep_ms * interval '1 millisecond' OFFSET 0
      ) o));
  END IF;

  -- Not a webhook that waits already with no place: its wait carries it, outside the order.
  INSERT INTO webhook_order (merchant_id, endpoint_id, order_key, webhook_id)
  SELECT a.m, a.p, a.k, a.w FROM unnest(a_merchants, a_endpoints, a_keys, a_webhooks) WITH ORDINALITY AS a(m, p, k, w, n)
  WHERE NOT EXISTS (SELECT 1 FROM webhook_waits x WHERE x.merchant_id = a.m AND x.endpoint_id = a.p AND x.webhook_id = a.w)
  ORDER BY a.n
  ON CONFLICT DO NOTHING;

  RETURN QUERY
  WITH batch AS (
    SELECT a.m, a.p, a.w, a.h, a.c, o.order_key AS k, o.seq, o.ended_at IS NOT NULL AS ended
    FROM unnest(a_merchants, a_endpoints, a_webhooks, a_headers, a_contents) AS a(m, p, w, h, c) LEFT JOIN LATERAL (
      SELECT x.order_key, x.seq, x.ended_at FROM webhook_order x WHERE x.merchant_id = a.m AND x.endpoint_id = a.p AND x.webhook_id = a.w OFFSET 0
    ) o ON true
  ), state AS (
    SELECT b.*,
      EXISTS (SELECT 1 FROM webhook_order e WHERE e.merchant_id = b.m AND e.endpoint_id = b.p AND e.order_key = b.k AND e.seq < b.seq AND e.ended_at IS NULL) AS behind,
      EXISTS (SELECT 1 FROM webhook_waits x WHERE x.merchant_id = b.m AND x.endpoint_id = b.p AND x.webhook_id = b.w) AS waiting
    FROM batch b
  ), bodies AS (
    INSERT INTO webhook_bodies (merchant_id, webhook_id, endpoint_id, content)
    SELECT s.m, s.w, s.p, decode(s.c, 'hex') FROM state s WHERE s.behind AND NOT s.waiting AND NOT s.ended AND s.c IS NOT NULL
    ON CONFLICT DO NOTHING
  ), waits AS (
    INSERT INTO webhook_waits (merchant_id, webhook_id, endpoint_id, attempt, due_at, pick_at, reason, headers)
    SELECT s.m, s.w, s.p, 0, now(), NULL, 'ordered', s.h::jsonb FROM state s WHERE s.behind AND NOT s.waiting AND NOT s.ended AND s.c IS NOT NULL
    ON CONFLICT DO NOTHING
  )
  SELECT s.m, s.p, s.w, CASE
    WHEN s.ended THEN 'ended'
    WHEN s.waiting THEN 'waiting'
    WHEN s.behind THEN CASE WHEN s.c IS NULL THEN 'behind' ELSE 'waiting' END
    ELSE 'head' END
  FROM state s;
END $$;
