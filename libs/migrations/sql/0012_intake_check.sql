-- Idempotent intake's check (libs/intake-keys) as a function: PL/pgSQL keeps its statement's plan
-- for the session, where the same text sent on its own was parsed, analysed and planned again for
-- every batch (about half of PostgreSQL's CPU per check: ~100 -> ~60 µs a key at ~10 keys a batch), and
-- no client needs named statements (PGlite and the pool alike). The statement is 0007's check,
-- unchanged: `keys_*` are the batch's distinct keys, `window_ms` INTAKE_DEDUPE_WINDOW, `dropped_*`
-- the repeats dropped since the last batch (counted on live rows). Answers one row of indexes
-- (1-based) into the keys: those seen before, and of those, the ones the delivery log holds.
-- Its commit does not wait for the WAL flush (synchronous_commit off, this transaction only; alone
-- it halved a check's median wait, 9.5 -> 5.1 ms, in one run on the shared machine). What a
-- PostgreSQL crash may lose: the keys committed in the last ~0.6 s (3 x wal_writer_delay); a
-- repeat of one of them arriving after the
-- restart is delivered again, as any repeat is while PostgreSQL does not answer. A repeat dropped
-- before the crash stays right: its first copy was in the broker (delivered, or redelivered and
-- then taken as a first sight), whatever became of the key's row.
CREATE FUNCTION intake_check(
  keys_merchant text[], keys_webhook text[], window_ms float8, dropped_merchant text[], dropped_webhook text[],
  OUT repeats bigint[], OUT recorded bigint[]
) LANGUAGE plpgsql AS $$
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
    SELECT k.n, EXISTS (SELECT 1 FROM delivery_webhooks w WHERE w.merchant_id = k.merchant_id AND w.webhook_id = k.webhook_id) AS logged
    FROM input k WHERE NOT EXISTS (SELECT 1 FROM fresh f WHERE f.merchant_id = k.merchant_id AND f.webhook_id = k.webhook_id)
  )
  SELECT coalesce(array_agg(s.n), '{}'), coalesce(array_agg(s.n) FILTER (WHERE s.logged), '{}') INTO repeats, recorded FROM seen s;
END
$$;
