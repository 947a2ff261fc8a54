-- Order per reference: places whose end will never come are released by the rows. A copy given
-- again after its endpoint stopped ordering (order off, endpoint disabled or deleted, merchant gone)
-- looks its place up to end it; when PostgreSQL did not answer within 2 s it was sent (or skipped)
-- and acked with its place open, and the webhooks behind it (waits with no pick time) waited for
-- ever. Each dispatcher's upkeep (libs/ordering/upkeep.ts) calls webhook_order_release() with the
-- lines that order now, per its directory.
-- `admitted_at`: when the place was taken, PostgreSQL's clock. A constant default per statement
-- (now() is stable): no rewrite; rows from before this get the migration's time.
-- Additive (a column with a default, a new function no older program calls): the
-- programs of 0025 run on it unchanged.
-- runs with releases from: 0025
ALTER TABLE webhook_order ADD COLUMN admitted_at timestamptz NOT NULL DEFAULT now();

-- Up to `batch` open places that are no line's any more: older than older_ms, with no wait of
-- their own (a wait's hand-back ends its place), of a (merchant, endpoint) not among
-- keep_merchants/keep_endpoints (the lines that order now). Found endpoint by endpoint: the
-- endpoints with open places are walked on webhook_order_line (a skip scan, one probe each) and
-- only those not kept are read, so an endpoint that still orders costs one probe however many of
-- its webhooks wait (a million behind a dead endpoint's head: ~20 ms a round here, where reading
-- every old open place by age took ~57 ms at 200,000 and grew with them). Each is taken under its key's advisory
-- lock (webhook_order_step's), not waited for (a busy key is left to the next round), checked again
-- under it, and deleted, not ended: its copy may still be in a queue (requeued by a dispatcher that
-- stopped), and given again it must find no place, so it is sent (or skipped) as a new webhook,
-- rather than found ended and dropped unsent. The line's next, if it waits as 'ordered', is due now
-- (as an end makes it). Returns the places released.
CREATE FUNCTION webhook_order_release(keep_merchants text[], keep_endpoints text[], older_ms float8, batch integer)
RETURNS TABLE (released_merchant text, released_endpoint text, released text) LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
  -- The lines kept, as the keys of one object: each candidate's look-up a binary search, whatever
  -- the plan (a join of the arrays was a nested loop over every pair, for every candidate).
  keep jsonb := (SELECT COALESCE(jsonb_object_agg(l.m || E'\x1f' || l.e, true), '{}'::jsonb) FROM unnest(keep_merchants, keep_endpoints) AS l(m, e));
  p record;
BEGIN
  FOR p IN
    WITH RECURSIVE lines AS (
      (SELECT o.merchant_id AS m, o.endpoint_id AS e FROM webhook_order o WHERE o.ended_at IS NULL ORDER BY o.merchant_id, o.endpoint_id LIMIT 1)
      UNION ALL
      SELECT n.m, n.e FROM lines l CROSS JOIN LATERAL (
        SELECT o.merchant_id AS m, o.endpoint_id AS e FROM webhook_order o
        WHERE o.ended_at IS NULL AND (o.merchant_id, o.endpoint_id) > (l.m, l.e) ORDER BY o.merchant_id, o.endpoint_id LIMIT 1
      ) n
    )
    SELECT c.m, c.e, c.k, c.w FROM lines l CROSS JOIN LATERAL (
      SELECT o.merchant_id AS m, o.endpoint_id AS e, o.order_key AS k, o.webhook_id AS w FROM webhook_order o
      WHERE o.merchant_id = l.m AND o.endpoint_id = l.e AND o.ended_at IS NULL AND o.admitted_at < now() - older_ms * interval '1 millisecond'
        AND NOT EXISTS (SELECT 1 FROM webhook_waits x WHERE x.merchant_id = o.merchant_id AND x.endpoint_id = o.endpoint_id AND x.webhook_id = o.webhook_id)
      LIMIT batch
    ) c
    WHERE NOT (keep ? (l.m || E'\x1f' || l.e))
    LIMIT batch
  LOOP
    CONTINUE WHEN NOT pg_try_advisory_xact_lock(hashtextextended(p.m || E'\x1f' || p.e || E'\x1f' || p.k, 55));
    DELETE FROM webhook_order o WHERE o.merchant_id = p.m AND o.endpoint_id = p.e AND o.webhook_id = p.w AND o.ended_at IS NULL
      AND NOT EXISTS (SELECT 1 FROM webhook_waits x WHERE x.merchant_id = p.m AND x.endpoint_id = p.e AND x.webhook_id = p.w);
    CONTINUE WHEN NOT FOUND;
    UPDATE webhook_waits w SET pick_at = now(), due_at = now(),
      headers = jsonb_set(w.headers, '{x-first-seen-at}', to_jsonb(to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')))
    FROM (
      SELECT o.webhook_id FROM webhook_order o
      WHERE o.merchant_id = p.m AND o.endpoint_id = p.e AND o.order_key = p.k AND o.ended_at IS NULL ORDER BY o.seq LIMIT 1
    ) h
    WHERE w.merchant_id = p.m AND w.endpoint_id = p.e AND w.webhook_id = h.webhook_id AND w.reason = 'ordered' AND w.pick_at IS NULL;
    released_merchant := p.m;
    released_endpoint := p.e;
    released := p.w;
    RETURN NEXT;
  END LOOP;
END $$;
