-- Order per reference: webhook_order_release() of 0026 keeps, besides the lines its caller names (the
-- lines that order per that dispatcher's directory), every line the merchants table says orders: an
-- endpoint of the merchant's row (or its first, for the line '' of places taken before endpoints)
-- enabled with orderByReference on. The caller's directory is a cache: one that had not heard of a
-- change (order turned on again, a row sealed with a key it lacks and served at an older version,
-- its notifications and polls failing) released the hour-old head of a line that orders, whose
-- copy may still be in dispatch behind a backlog: the webhook behind it went first, and the head
-- came back after it, out of order (test/integration/order-parked.test.ts). The table is the
-- record; a place is released only when neither says its line orders. Merchants kept in
-- MERCHANTS_FILE have no row: the caller's lines decide for them, as before.
-- Same signature, releasing no more than before: the programs of 0026 run on it unchanged.
-- runs with releases from: 0026
CREATE OR REPLACE FUNCTION webhook_order_release(keep_merchants text[], keep_endpoints text[], older_ms float8, batch integer)
RETURNS TABLE (released_merchant text, released_endpoint text, released text) LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
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
    ), released AS (
      -- The lines neither the caller nor the merchants table keeps (one probe of the merchant's row each).
      SELECT l.m, l.e FROM lines l
      WHERE NOT (keep ? (l.m || E'\x1f' || l.e))
        AND NOT EXISTS (
          SELECT 1 FROM merchants r CROSS JOIN LATERAL jsonb_array_elements(CASE jsonb_typeof(r.endpoints) WHEN 'array' THEN r.endpoints ELSE '[]'::jsonb END) WITH ORDINALITY AS x(ep, n)
          WHERE r.id = l.m AND (x.ep->>'id' = l.e OR (l.e = '' AND x.n = 1)) AND x.ep @> '{"enabled": true, "orderByReference": true}'::jsonb)
    )
    SELECT c.m, c.e, c.k, c.w FROM released l CROSS JOIN LATERAL (
      SELECT o.merchant_id AS m, o.endpoint_id AS e, o.order_key AS k, o.webhook_id AS w FROM webhook_order o
      WHERE o.merchant_id = l.m AND o.endpoint_id = l.e AND o.ended_at IS NULL AND o.admitted_at < now() - older_ms * interval '1 millisecond'
        AND NOT EXISTS (SELECT 1 FROM webhook_waits x WHERE x.merchant_id = o.merchant_id AND x.endpoint_id = o.endpoint_id AND x.webhook_id = o.webhook_id)
      LIMIT batch
    ) c
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
