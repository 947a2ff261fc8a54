-- A copy the broker gives again looks up the webhook's open places (OrderStore.openPlaces: merchant,
-- webhook, key, no endpoint). Neither the primary key (merchant, endpoint, webhook) nor
-- webhook_order_line (merchant, endpoint, key, seq) fits without the endpoint, and PostgreSQL 15 has
-- no skip scan: each look-up read every open place of the merchant (a dead endpoint's million), past
-- the gate's 2 s, and a held copy asked again each second. This index finds the webhook's rows alone.
-- Releases before it run the same statement; the index only serves it.
-- runs with releases from: 0026
CREATE INDEX webhook_order_open ON webhook_order (merchant_id, webhook_id) WHERE ended_at IS NULL;
