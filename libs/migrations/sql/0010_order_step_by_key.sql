-- webhook_order_step() again (issue 55, BENCHMARKS.md section 22), its work per webhook flat:
-- - An end finds its row by its primary key alone. 0009 joined the ends on `ended_at IS NULL`,
--   which let the planner read the whole partial line index, its dead entries too (every ended
--   row leaves one until a vacuum), for every step: PostgreSQL's CPU per webhook grew with the
--   table, 140 µs over the first 25,000 rows to 450 µs past 50,000. A row already ended is
--   stamped again (a copy ended twice: rare, and it only moves its hour on); releasing its key's
--   head then again is harmless, as any head with no earlier row left is due.
-- - The head of a key is looked up per key (LATERAL ... LIMIT 1), in the line index by key.
-- - An intake may come without its headers and bytes (null): one behind an earlier webhook of its
--   key is then answered 'behind' and nothing is written; the dispatcher steps it again with them
--   (then 'waiting', or 'head' if the earlier one ended meanwhile). Most intakes head their line,
--   and so never build, send or parse their bytes.
CREATE OR REPLACE FUNCTION webhook_order_step(
  a_merchants text[], a_keys text[], a_webhooks text[], a_headers text[], a_contents text[],
  e_merchants text[], e_webhooks text[], keep_ms float8
) RETURNS TABLE (admitted_merchant text, admitted text, state text) LANGUAGE plpgsql
-- Every statement here looks up each element of a batch by index, whatever the table's size, in
-- one plan made once per connection. Left to choose, PostgreSQL planned each call again (0.6 ms of
-- its CPU per step: a custom plan knows the arrays' lengths, so the generic one looked dearer),
-- and a plan made while the table was nearly empty (a seq scan and a hash join) stayed while it
-- grew to an hour of webhooks.
SET plan_cache_mode = force_generic_plan SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
#variable_conflict use_column
DECLARE
  ended_merchants text[];
  ended_keys text[];
BEGIN
  -- The keys of the ends (a row's key never changes: read before the lock), then every key's
  -- advisory lock, in one order: the steps of one key one at a time.
  SELECT array_agg(o.merchant_id), array_agg(o.order_key) INTO ended_merchants, ended_keys
  FROM unnest(e_merchants, e_webhooks) AS e(m, w) JOIN webhook_order o ON o.merchant_id = e.m AND o.webhook_id = e.w;
  PERFORM pg_advisory_xact_lock(l.k) FROM (
    SELECT DISTINCT hashtextextended(s.m || E'\x1f' || s.k, 55) AS k
    FROM (SELECT * FROM unnest(a_merchants, a_keys) UNION ALL SELECT * FROM unnest(ended_merchants, ended_keys)) AS s(m, k)
    ORDER BY 1
  ) l;

  IF ended_merchants IS NOT NULL THEN
    UPDATE webhook_order o SET ended_at = now() FROM unnest(e_merchants, e_webhooks) AS e(m, w)
    WHERE o.merchant_id = e.m AND o.webhook_id = e.w;
    -- The new head of each key: due now (its schedule starts now too), if it waits as 'ordered'.
    UPDATE webhook_waits w SET pick_at = now(), due_at = now(),
      headers = jsonb_set(w.headers, '{x-first-seen-at}', to_jsonb(to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')))
    FROM (SELECT DISTINCT g.m, g.k FROM unnest(ended_merchants, ended_keys) AS g(m, k)) g
    CROSS JOIN LATERAL (
      SELECT o.webhook_id FROM webhook_order o
      WHERE o.merchant_id = g.m AND o.order_key = g.k AND o.ended_at IS NULL ORDER BY o.seq LIMIT 1
    ) h
    WHERE w.merchant_id = g.m AND w.webhook_id = h.webhook_id AND w.reason = 'ordered' AND w.pick_at IS NULL;
    DELETE FROM webhook_order o WHERE (o.merchant_id, o.webhook_id) IN (
      SELECT x.merchant_id, x.webhook_id FROM webhook_order x WHERE x.ended_at < now() - keep_ms * interval '1 millisecond'
      ORDER BY x.ended_at LIMIT 2 * cardinality(e_webhooks) FOR UPDATE SKIP LOCKED);
  END IF;

  IF cardinality(a_webhooks) = 0 THEN RETURN; END IF;

  -- In the batch's order: two intakes of one key in one batch take their places as they came.
  INSERT INTO webhook_order (merchant_id, order_key, webhook_id)
  SELECT a.m, a.k, a.w FROM unnest(a_merchants, a_keys, a_webhooks) WITH ORDINALITY AS a(m, k, w, n) ORDER BY a.n
  ON CONFLICT DO NOTHING;

  RETURN QUERY
  WITH batch AS (
    SELECT a.m, a.w, a.h, a.c, o.order_key AS k, o.seq, o.ended_at IS NOT NULL AS ended FROM unnest(a_merchants, a_webhooks, a_headers, a_contents) AS a(m, w, h, c)
    JOIN webhook_order o ON o.merchant_id = a.m AND o.webhook_id = a.w
  ), state AS (
    SELECT b.*,
      EXISTS (SELECT 1 FROM webhook_order e WHERE e.merchant_id = b.m AND e.order_key = b.k AND e.seq < b.seq AND e.ended_at IS NULL) AS behind,
      -- A redelivery of an intake that already waits (ordered, or the head's own retry): the row decides.
      EXISTS (SELECT 1 FROM webhook_waits x WHERE x.merchant_id = b.m AND x.webhook_id = b.w) AS waiting
    FROM batch b
  ), bodies AS (
    INSERT INTO webhook_bodies (merchant_id, webhook_id, content)
    SELECT s.m, s.w, decode(s.c, 'hex') FROM state s WHERE s.behind AND NOT s.waiting AND NOT s.ended AND s.c IS NOT NULL
    ON CONFLICT DO NOTHING
  ), waits AS (
    INSERT INTO webhook_waits (merchant_id, webhook_id, attempt, due_at, pick_at, reason, headers)
    SELECT s.m, s.w, 0, now(), NULL, 'ordered', s.h::jsonb FROM state s WHERE s.behind AND NOT s.waiting AND NOT s.ended AND s.c IS NOT NULL
    ON CONFLICT DO NOTHING
  )
  SELECT s.m, s.w, CASE
    WHEN s.ended THEN 'ended'
    WHEN s.waiting THEN 'waiting'
    WHEN s.behind THEN CASE WHEN s.c IS NULL THEN 'behind' ELSE 'waiting' END
    ELSE 'head' END
  FROM state s;
END $$;
