-- Throttle per endpoint (issue 55). The configured `maxPerSecond` is a field of the merchant's
-- webhook (its versioned row); the rate the dispatchers send at is taken from the GCRA rows of
-- `rate_limits` (keys `throttle:<merchant>` and `throttle-queue:<merchant>`), shared by every
-- dispatcher. What an endpoint's 429/503 answers did to its rate (adaptive) is one row here, the
-- one copy every dispatcher reads, outside the merchant's version like endpoint_health: lowered
-- (halved) at most once a second by a 429 or 503, raised by a tenth a second while it succeeds,
-- and deleted once back at `ceiling` (the configured rate, or what it was sent when first lowered).
CREATE TABLE endpoint_rates (
  merchant_id text NOT NULL,
  endpoint_id text NOT NULL DEFAULT '',
  rate double precision NOT NULL,
  ceiling double precision NOT NULL,
  changed_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (merchant_id, endpoint_id)
);
