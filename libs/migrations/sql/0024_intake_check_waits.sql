-- intake_check (0012, with 0015's settings) counts a webhook's wait as settling its first walk, as
-- it counts the delivery log's row: a dispatcher that died after its first attempt failed and its
-- wait was written, before its record reached the log (the recorder stores it a moment later) and
-- before its ack, left the broker's redelivered copy taken as a first sight: attempted at once, and
-- then again when the wait came due (two deliveries, no crash needed beyond the first). The wait
-- is the one copy that carries the webhook on: the redelivered copy is a repeat. Read by the
-- primary key's prefix, for repeats only (keys seen before), as the log's row is.
CREATE OR REPLACE FUNCTION intake_check(
  keys_merchant text[], keys_webhook text[], window_ms float8, dropped_merchant text[], dropped_webhook text[],
  OUT repeats bigint[], OUT recorded bigint[]
) LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan SET enable_seqscan = off AS $$
BEGIN
  PERFORM set_config('synchronous_commit', 'off', true);
  WITH input AS (
    SELECT * FROM unnest(keys_merchant, keys_webhook) WITH ORDINALITY AS k(merchant_id, webhook_id, n)
  ), earlier AS (
    SELECT DISTINCT k.n FROM input k JOIN intake_keys i ON i.merchant_id = k.merchant_id AND i.webhook_id = k.webhook_id
    WHERE i.day >= date_trunc('day', now() - window_ms * interval '1 millisecond', 'UTC') AND i.day < date_trunc('day', now(), 'UTC')
      AND i.first_seen_at > now() - window_ms * interval '1 millisecond'
  ), fresh AS (
    INSERT INTO intake_keys AS i (day, merchant_id, webhook_id)
    SELECT date_trunc('day', now(), 'UTC'), k.merchant_id, k.webhook_id FROM input k WHERE k.n NOT IN (SELECT e.n FROM earlier e)
    ON CONFLICT (merchant_id, webhook_id, day) DO UPDATE SET first_seen_at = now(), duplicates = 0, last_duplicate_at = NULL
    WHERE i.first_seen_at <= now() - window_ms * interval '1 millisecond'
    RETURNING i.merchant_id, i.webhook_id
  ), counted AS (
    UPDATE intake_keys i SET duplicates = i.duplicates + t.duplicates, last_duplicate_at = now()
    FROM (
      SELECT d.merchant_id, d.webhook_id, count(*)::integer AS duplicates FROM unnest(dropped_merchant, dropped_webhook) AS d(merchant_id, webhook_id)
      GROUP BY d.merchant_id, d.webhook_id
    ) t
    WHERE i.merchant_id = t.merchant_id AND i.webhook_id = t.webhook_id
      AND i.day >= date_trunc('day', now() - window_ms * interval '1 millisecond', 'UTC')
      AND i.first_seen_at > now() - window_ms * interval '1 millisecond'
  ), seen AS (
    SELECT k.n, EXISTS (SELECT 1 FROM delivery_webhooks w WHERE w.merchant_id = k.merchant_id AND w.webhook_id = k.webhook_id)
      OR EXISTS (SELECT 1 FROM webhook_waits x WHERE x.merchant_id = k.merchant_id AND x.webhook_id = k.webhook_id) AS logged
    FROM input k WHERE NOT EXISTS (SELECT 1 FROM fresh f WHERE f.merchant_id = k.merchant_id AND f.webhook_id = k.webhook_id)
  )
  SELECT coalesce(array_agg(s.n), '{}'), coalesce(array_agg(s.n) FILTER (WHERE s.logged), '{}') INTO repeats, recorded FROM seen s;
END
$$;
