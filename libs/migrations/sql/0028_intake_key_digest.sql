-- Idempotent intake tells a repeat whose body differs from its original's: the key (the messageId)
-- decides, so upstream's corrected event published again under the same messageId was dropped with
-- nothing said but the original's count, and nobody learned the correction never reached the
-- merchant. `body_digest`: the first 16 bytes of the SHA-256 of the message body the key was first
-- seen with (NULL: taken by a release before this one, or by a check of the 0024 signature).
-- intake_check gains `keys_digest` (one per key, NULL for none) and answers `changed`: of the
-- repeats, those whose original's digest is known and differs. A new signature beside 0024's, which
-- the dispatchers of the release before go on calling while the roll reaches them (their keys have
-- no digest, so a repeat of one is never said changed; one that takes over a row past a window
-- under a day leaves the row's old digest, so a repeat of it may be said changed wrongly until the
-- roll ends: a log line, nothing else). Additive (a nullable column, no rewrite;
-- a new function): the programs of 0026 run on it unchanged.
-- runs with releases from: 0026
ALTER TABLE intake_keys ADD COLUMN body_digest bytea;

-- 0024's statement, with the digest written on a first sight (and on a row taken over past the
-- window), and read back for the repeats. The digest is compared with the live row's found as
-- `earlier` finds it, or today's, by the primary key's prefix: a repeat only (keys seen before).
-- A row the same instant's other statement committed after this one began is not seen (as for
-- `earlier`): its repeat is not said changed.
CREATE FUNCTION intake_check(
  keys_merchant text[], keys_webhook text[], keys_digest bytea[], window_ms float8, dropped_merchant text[], dropped_webhook text[],
  OUT repeats bigint[], OUT recorded bigint[], OUT changed bigint[]
) LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan SET enable_seqscan = off AS $$
BEGIN
  PERFORM set_config('synchronous_commit', 'off', true);
  WITH input AS (
    SELECT * FROM unnest(keys_merchant, keys_webhook, keys_digest) WITH ORDINALITY AS k(merchant_id, webhook_id, digest, n)
  ), earlier AS (
    SELECT DISTINCT k.n FROM input k JOIN intake_keys i ON i.merchant_id = k.merchant_id AND i.webhook_id = k.webhook_id
    WHERE i.day >= date_trunc('day', now() - window_ms * interval '1 millisecond', 'UTC') AND i.day < date_trunc('day', now(), 'UTC')
      AND i.first_seen_at > now() - window_ms * interval '1 millisecond'
  ), fresh AS (
    INSERT INTO intake_keys AS i (day, merchant_id, webhook_id, body_digest)
    SELECT date_trunc('day', now(), 'UTC'), k.merchant_id, k.webhook_id, k.digest FROM input k WHERE k.n NOT IN (SELECT e.n FROM earlier e)
    ON CONFLICT (merchant_id, webhook_id, day) DO UPDATE SET first_seen_at = now(), duplicates = 0, last_duplicate_at = NULL, body_digest = excluded.body_digest
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
      OR EXISTS (SELECT 1 FROM webhook_waits x WHERE x.merchant_id = k.merchant_id AND x.webhook_id = k.webhook_id) AS logged,
      k.digest IS NOT NULL AND EXISTS (
        SELECT 1 FROM intake_keys i WHERE i.merchant_id = k.merchant_id AND i.webhook_id = k.webhook_id
          AND i.day >= date_trunc('day', now() - window_ms * interval '1 millisecond', 'UTC')
          AND i.first_seen_at > now() - window_ms * interval '1 millisecond'
          AND i.body_digest IS NOT NULL AND i.body_digest <> k.digest
      ) AS differs
    FROM input k WHERE NOT EXISTS (SELECT 1 FROM fresh f WHERE f.merchant_id = k.merchant_id AND f.webhook_id = k.webhook_id)
  )
  SELECT coalesce(array_agg(s.n), '{}'), coalesce(array_agg(s.n) FILTER (WHERE s.logged), '{}'), coalesce(array_agg(s.n) FILTER (WHERE s.differs), '{}')
  INTO repeats, recorded, changed FROM seen s;
END
$$;
