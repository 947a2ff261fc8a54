-- A webhook is delivered once per matching endpoint (issue 56): its failure, its row in the log and
-- its records are per delivery, webhook x endpoint. `endpoint_id` is the endpoint's id (ep_…); ''
-- on rows written before endpoints fanned out, read as "the merchant's only endpoint" (a resend of
-- such a row goes to the merchant's first endpoint). Adding a NOT NULL column with a constant
-- default rewrites nothing (PostgreSQL 11+), so existing rows keep working as they are.

-- The failure index (libs/failed/store.ts): a webhook fails once per endpoint, each row claimed and
-- resent on its own. The claim's lookups (merchant, webhook) are served by the key's prefix.
ALTER TABLE failed_webhooks ADD COLUMN endpoint_id text NOT NULL DEFAULT '';
ALTER TABLE failed_webhooks DROP CONSTRAINT failed_webhooks_pkey, ADD PRIMARY KEY (merchant_id, webhook_id, endpoint_id);

-- The delivery log (libs/delivery-store): one row per delivery. Its key's prefix (merchant_id,
-- webhook_id) still serves every lookup by webhook: intake_check (0012), a webhook's detail, the
-- failure index's join, the records' lateral lookups. The list's orders end with the endpoint, so a
-- page's cursor (first seen, webhook, endpoint) is read from the index in order.
ALTER TABLE delivery_webhooks ADD COLUMN endpoint_id text NOT NULL DEFAULT '';
ALTER TABLE delivery_webhooks DROP CONSTRAINT delivery_webhooks_pkey, ADD PRIMARY KEY (merchant_id, webhook_id, endpoint_id);
DROP INDEX delivery_webhooks_newest;
CREATE INDEX delivery_webhooks_newest ON delivery_webhooks (merchant_id, first_seen_at DESC, webhook_id DESC, endpoint_id DESC);
DROP INDEX delivery_webhooks_status;
CREATE INDEX delivery_webhooks_status ON delivery_webhooks (merchant_id, status, first_seen_at DESC, webhook_id DESC, endpoint_id DESC);
DROP INDEX delivery_webhooks_event;
CREATE INDEX delivery_webhooks_event ON delivery_webhooks (merchant_id, event, first_seen_at DESC, webhook_id DESC, endpoint_id DESC);
-- The list filtered by endpoint, in its order.
CREATE INDEX delivery_webhooks_endpoint ON delivery_webhooks (merchant_id, endpoint_id, first_seen_at DESC, webhook_id DESC);

-- Each record says which endpoint it was for (each day's partition gets the column too).
ALTER TABLE delivery_records ADD COLUMN endpoint_id text NOT NULL DEFAULT '';
