-- The place, in the delivery's own order ({resend, attempt number, rank, stream position}, as
-- last_key), of its last record that made an attempt: its HTTP status is the delivery's
-- last_http_status. It was the status of the attempt whose host clock read latest, so a webhook
-- retried on a host whose clock is ahead, then delivered on another, showed `delivered` beside the
-- retry's 500. Rows written before this have none: the next attempt stored takes its place.
ALTER TABLE delivery_webhooks ADD COLUMN last_attempt_key bigint[];
