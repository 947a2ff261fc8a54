-- Each record's place in its delivery's own order ({resend, attempt number, rank, stream position},
-- as delivery_webhooks.last_key): a webhook's detail lists its records by it. It listed them by
-- `at`, the writing host's clock, so a retry written on a host whose clock is ahead came after the
-- delivery that followed it, and a resend's attempts before the failure they resent. Records stored
-- before this have none: listed first, by their time, as before. Nullable: no rewrite.
ALTER TABLE delivery_records ADD COLUMN key bigint[];
