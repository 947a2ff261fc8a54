-- Fan-out (issue 56): an event goes to each of a merchant's matching endpoints, one delivery each
-- with its own attempts, waits, circuit, failing clock and order line. The runtime state keyed by
-- merchant is keyed by (merchant, endpoint) here. Rows written before this were a merchant's one
-- endpoint's: they take its id (the merchant's first endpoint; the platform's own for operational
-- events), and a wait's headers name it too, so its next hand-back carries x-endpoint-id. A row
-- whose merchant has no endpoint keeps '' (nothing can be sent: it ends like a disabled webhook).

-- Waits and their bytes: one row per endpoint's delivery of a webhook (the bytes once per wait:
-- a body shared by several endpoints' waits could go with the first to end while another's first
-- wait was being written).
ALTER TABLE webhook_bodies ADD COLUMN endpoint_id text NOT NULL DEFAULT '';
ALTER TABLE webhook_bodies DROP CONSTRAINT webhook_bodies_pkey, ADD PRIMARY KEY (merchant_id, webhook_id, endpoint_id);
CREATE TEMPORARY TABLE first_endpoints ON COMMIT DROP AS
  SELECT id AS merchant_id, endpoints->0->>'id' AS endpoint_id FROM merchants WHERE jsonb_array_length(endpoints) > 0
  UNION ALL SELECT 'platform:operational', 'ep_platform';
UPDATE webhook_waits w SET endpoint_id = f.endpoint_id, headers = w.headers || jsonb_build_object('x-endpoint-id', f.endpoint_id)
  FROM first_endpoints f WHERE w.merchant_id = f.merchant_id AND w.endpoint_id = '';
UPDATE webhook_bodies b SET endpoint_id = f.endpoint_id FROM first_endpoints f WHERE b.merchant_id = f.merchant_id AND b.endpoint_id = '';

-- The adaptive rate (endpoint_rates, keyed (merchant, endpoint) since 0008, written with '' until now).
UPDATE endpoint_rates r SET endpoint_id = f.endpoint_id FROM first_endpoints f WHERE r.merchant_id = f.merchant_id AND r.endpoint_id = '';

-- An open circuit parks its endpoint's waits, not its merchant's other endpoints'.
ALTER TABLE wait_circuits ADD COLUMN endpoint_id text NOT NULL DEFAULT '';
UPDATE wait_circuits c SET endpoint_id = f.endpoint_id FROM first_endpoints f WHERE c.merchant_id = f.merchant_id;
ALTER TABLE wait_circuits DROP CONSTRAINT wait_circuits_pkey, ADD PRIMARY KEY (merchant_id, endpoint_id);
DROP INDEX webhook_waits_parked;
CREATE INDEX webhook_waits_parked ON webhook_waits (merchant_id, endpoint_id, due_at) WHERE parked;

-- The failing clock (auto-disable) per endpoint: a clock measured on a URL none of its merchant's
-- endpoints has any more keeps '' and counts for nothing, as before.
ALTER TABLE endpoint_health ADD COLUMN endpoint_id text NOT NULL DEFAULT '';
UPDATE endpoint_health h SET endpoint_id = e->>'id' FROM merchants m, jsonb_array_elements(m.endpoints) e
  WHERE m.id = h.merchant_id AND e->>'url' = h.url;
ALTER TABLE endpoint_health DROP CONSTRAINT endpoint_health_pkey, ADD PRIMARY KEY (merchant_id, endpoint_id);

-- Order per reference per endpoint: the line is (merchant, endpoint, key), so one endpoint's
-- retries never hold another's webhooks of the reference.
ALTER TABLE webhook_order ADD COLUMN endpoint_id text NOT NULL DEFAULT '';
UPDATE webhook_order o SET endpoint_id = f.endpoint_id FROM first_endpoints f WHERE o.merchant_id = f.merchant_id;
ALTER TABLE webhook_order DROP CONSTRAINT webhook_order_pkey, ADD PRIMARY KEY (merchant_id, endpoint_id, webhook_id);
DROP INDEX webhook_order_line;
CREATE INDEX webhook_order_line ON webhook_order (merchant_id, endpoint_id, order_key, seq) WHERE ended_at IS NULL;

-- webhook_order_step() of 0010, each webhook named by (merchant, endpoint, webhook).
DROP FUNCTION webhook_order_step(text[], text[], text[], text[], text[], text[], text[], float8);
CREATE FUNCTION webhook_order_step(
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
BEGIN
  SELECT array_agg(o.merchant_id), array_agg(o.endpoint_id), array_agg(o.order_key) INTO ended_merchants, ended_endpoints, ended_keys
  FROM unnest(e_merchants, e_endpoints, e_webhooks) AS e(m, p, w) JOIN webhook_order o ON o.merchant_id = e.m AND o.endpoint_id = e.p AND o.webhook_id = e.w;
  PERFORM pg_advisory_xact_lock(l.k) FROM (
    SELECT DISTINCT hashtextextended(s.m || E'\x1f' || s.p || E'\x1f' || s.k, 55) AS k
    FROM (SELECT * FROM unnest(a_merchants, a_endpoints, a_keys) UNION ALL SELECT * FROM unnest(ended_merchants, ended_endpoints, ended_keys)) AS s(m, p, k)
    ORDER BY 1
  ) l;

  IF ended_merchants IS NOT NULL THEN
    UPDATE webhook_order o SET ended_at = now() FROM unnest(e_merchants, e_endpoints, e_webhooks) AS e(m, p, w)
    WHERE o.merchant_id = e.m AND o.endpoint_id = e.p AND o.webhook_id = e.w;
    UPDATE webhook_waits w SET pick_at = now(), due_at = now(),
      headers = jsonb_set(w.headers, '{x-first-seen-at}', to_jsonb(to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')))
    FROM (SELECT DISTINCT g.m, g.p, g.k FROM unnest(ended_merchants, ended_endpoints, ended_keys) AS g(m, p, k)) g
    CROSS JOIN LATERAL (
      SELECT o.webhook_id FROM webhook_order o
      WHERE o.merchant_id = g.m AND o.endpoint_id = g.p AND o.order_key = g.k AND o.ended_at IS NULL ORDER BY o.seq LIMIT 1
    ) h
    WHERE w.merchant_id = g.m AND w.endpoint_id = g.p AND w.webhook_id = h.webhook_id AND w.reason = 'ordered' AND w.pick_at IS NULL;
    DELETE FROM webhook_order o WHERE (o.merchant_id, o.endpoint_id, o.webhook_id) IN (
      SELECT x.merchant_id, x.endpoint_id, x.webhook_id FROM webhook_order x WHERE x.ended_at < now() - keep_ms * interval '1 millisecond'
      ORDER BY x.ended_at LIMIT 2 * cardinality(e_webhooks) FOR UPDATE SKIP LOCKED);
  END IF;

  IF cardinality(a_webhooks) = 0 THEN RETURN; END IF;

  INSERT INTO webhook_order (merchant_id, endpoint_id, order_key, webhook_id)
  SELECT a.m, a.p, a.k, a.w FROM unnest(a_merchants, a_endpoints, a_keys, a_webhooks) WITH ORDINALITY AS a(m, p, k, w, n) ORDER BY a.n
  ON CONFLICT DO NOTHING;

  RETURN QUERY
  WITH batch AS (
    SELECT a.m, a.p, a.w, a.h, a.c, o.order_key AS k, o.seq, o.ended_at IS NOT NULL AS ended
    FROM unnest(a_merchants, a_endpoints, a_webhooks, a_headers, a_contents) AS a(m, p, w, h, c)
    JOIN webhook_order o ON o.merchant_id = a.m AND o.endpoint_id = a.p AND o.webhook_id = a.w
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
