-- The time of a delivery's earliest record, as the host that wrote it read its clock. A webhook's
-- detail reads its records from this time on (the day partitions before it are skipped), where it
-- read them from first_seen_at: another dispatcher's clock, so a record written by a host whose
-- clock is behind the one that first saw the webhook (a retry or a fanned-out copy taken by another
-- dispatcher) was missing from the detail, its delivered attempt with it. Rows written before this
-- have none: read from first_seen_at, as before.
ALTER TABLE delivery_webhooks ADD COLUMN first_record_at timestamptz;

-- The place, in the delivery's own order ({resend, attempt number, rank, stream position}, as
-- last_key), of its last record that made an attempt: its HTTP status is the delivery's
-- last_http_status. It was the status of the attempt whose host clock read latest, so a webhook
-- retried on a host whose clock is ahead, then delivered on another, showed `delivered` beside the
-- retry's 500. Rows written before this have none: the next attempt stored takes its place.
ALTER TABLE delivery_webhooks ADD COLUMN last_attempt_key bigint[];
