-- An endpoint's queue of throttled waits is stretched to its new rate by one UPDATE at each adaptive
-- change (halved on a 429 or 503, raised each second while it succeeds). On the merchant's due index
-- it read every future wait of the merchant, on all its endpoints (another endpoint's million
-- retries or parked waits) to find the queue's rows. This index holds the queues alone.
-- Releases before it run the same statements; the index only serves them.
-- runs with releases from: 0026
CREATE INDEX webhook_waits_throttled ON webhook_waits (merchant_id, endpoint_id, due_at) WHERE reason = 'throttled';
