-- Retries are rows (issue 54): a webhook that waits for its next attempt (retry, busy endpoint,
-- open circuit) is one row, the only copy that decides; the TTL tiers and the retry safety net
-- (retry_claims, the overdue index on the log) are gone. The scheduler picks due rows by pick_at
-- (the due time, then the end of a hand-back's lease) with SKIP LOCKED, and `hand` (times handed
-- back or rewritten) lets only the current hand-back take, rewrite or end it.
CREATE TABLE webhook_waits (
  merchant_id text NOT NULL,
  webhook_id text NOT NULL,
  endpoint_id text NOT NULL DEFAULT '',
  attempt integer NOT NULL,
  due_at timestamptz NOT NULL,
  reason text NOT NULL,
  headers jsonb NOT NULL,
  hand integer NOT NULL DEFAULT 0,
  pick_at timestamptz,
  PRIMARY KEY (merchant_id, webhook_id, endpoint_id)
);
CREATE INDEX webhook_waits_pick ON webhook_waits (pick_at) WHERE pick_at IS NOT NULL;
CREATE INDEX webhook_waits_due ON webhook_waits (merchant_id, due_at);
-- A waiting webhook's bytes, stored once per webhook (not per wait), as received.
CREATE TABLE webhook_bodies (
  merchant_id text NOT NULL,
  webhook_id text NOT NULL,
  content bytea NOT NULL,
  PRIMARY KEY (merchant_id, webhook_id)
);
DROP TABLE retry_claims;
DROP INDEX delivery_webhooks_overdue;
