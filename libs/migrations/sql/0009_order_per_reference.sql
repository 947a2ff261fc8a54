-- Order per reference (issue 55), gating on rows: an ordered merchant's webhook has a row here from
-- intake until an hour (ORDER_ENDED_KEEP_MS) after it ends (delivered, failed, skipped). Its place in its key's line (`seq`) is taken
-- from an identity under the key's lock, so it is PostgreSQL's order of intake, never a host's
-- clock. Only the earliest row of a key goes to an attempt; a later one waits as a webhook_waits
-- row with reason 'ordered' and no pick time, which the end of the one before it sets. An ended
-- row stays an hour (ended_at), so that a copy redelivered after a crash between its end and its
-- ack is known as done, not sent again behind the webhooks after it.
CREATE TABLE webhook_order (
  merchant_id text NOT NULL,
  order_key text NOT NULL,
  webhook_id text NOT NULL,
  seq bigint GENERATED ALWAYS AS IDENTITY,
  ended_at timestamptz,
  PRIMARY KEY (merchant_id, webhook_id)
);
CREATE INDEX webhook_order_line ON webhook_order (merchant_id, order_key, seq) WHERE ended_at IS NULL;
CREATE INDEX webhook_order_ended ON webhook_order (ended_at) WHERE ended_at IS NOT NULL;

-- One batch of a dispatcher's order steps, in one round trip: first the ends (each row goes and
-- the next of its key, if it waits, is due now), then the intakes (each gets its row, or finds the
-- one a redelivery of it made, and is told 'head' (attempt it), 'waiting' (written as an 'ordered'
-- wait with its bytes, or found waiting) or 'ended' (a copy of one already done). Ended rows older
-- than keep_ms go, at most two per end, so the table holds about keep_ms of ends. The keys' advisory locks, taken in one order, make the steps
-- of one key one at a time; each statement after them sees what the steps before committed (a
-- PL/pgSQL statement takes its own snapshot), so an intake and the end of its predecessor never
-- miss each other.
CREATE FUNCTION webhook_order_step(
  a_merchants text[], a_keys text[], a_webhooks text[], a_headers text[], a_contents text[],
  e_merchants text[], e_webhooks text[], keep_ms float8
) RETURNS TABLE (admitted_merchant text, admitted text, state text) LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
  ended_merchants text[];
  ended_keys text[];
BEGIN
  PERFORM pg_advisory_xact_lock(l.k) FROM (
    SELECT DISTINCT hashtextextended(s.m || E'\x1f' || s.k, 55) AS k FROM (
      SELECT a.m, a.k FROM unnest(a_merchants, a_keys) AS a(m, k)
      UNION
      SELECT o.merchant_id, o.order_key FROM webhook_order o JOIN unnest(e_merchants, e_webhooks) AS e(m, w)
        ON o.merchant_id = e.m AND o.webhook_id = e.w AND o.ended_at IS NULL
    ) s ORDER BY 1
  ) l;

  WITH gone AS (
    UPDATE webhook_order o SET ended_at = now() FROM unnest(e_merchants, e_webhooks) AS e(m, w)
    WHERE o.merchant_id = e.m AND o.webhook_id = e.w AND o.ended_at IS NULL
    RETURNING o.merchant_id, o.order_key
  )
  SELECT array_agg(g.merchant_id), array_agg(g.order_key) INTO ended_merchants, ended_keys
  FROM (SELECT DISTINCT merchant_id, order_key FROM gone) g;

  IF ended_merchants IS NOT NULL THEN
    -- The new head of each key whose head ended: due now (its schedule starts now too).
    UPDATE webhook_waits w SET pick_at = now(), due_at = now(),
      headers = jsonb_set(w.headers, '{x-first-seen-at}', to_jsonb(to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')))
    FROM (
      SELECT DISTINCT ON (o.merchant_id, o.order_key) o.merchant_id, o.webhook_id
      FROM webhook_order o JOIN unnest(ended_merchants, ended_keys) AS g(m, k) ON o.merchant_id = g.m AND o.order_key = g.k
      WHERE o.ended_at IS NULL
      ORDER BY o.merchant_id, o.order_key, o.seq
    ) h
    WHERE w.merchant_id = h.merchant_id AND w.webhook_id = h.webhook_id AND w.reason = 'ordered' AND w.pick_at IS NULL;
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
    SELECT s.m, s.w, decode(s.c, 'hex') FROM state s WHERE s.behind AND NOT s.waiting AND NOT s.ended
    ON CONFLICT DO NOTHING
  ), waits AS (
    INSERT INTO webhook_waits (merchant_id, webhook_id, attempt, due_at, pick_at, reason, headers)
    SELECT s.m, s.w, 0, now(), NULL, 'ordered', s.h::jsonb FROM state s WHERE s.behind AND NOT s.waiting AND NOT s.ended
    ON CONFLICT DO NOTHING
  )
  SELECT s.m, s.w, CASE WHEN s.ended THEN 'ended' WHEN s.behind OR s.waiting THEN 'waiting' ELSE 'head' END FROM state s;
END $$;
