-- The delivery log keeps the body as the text sent (jsonb re-serialised it in PostgreSQL's key order
-- and number forms, so a resend from the log did not send the first attempt's bytes), and the
-- place in the webhook's own order of the record its status comes from (never a host's clock).
ALTER TABLE delivery_webhooks ALTER COLUMN payload TYPE text USING payload::text;
-- {resend, attempt number, rank, stream position} of the record status, next attempt and last
-- error come from (libs/delivery-store/materialise.ts).
ALTER TABLE delivery_webhooks ADD COLUMN last_key bigint[] NOT NULL DEFAULT '{}';
-- Resends claimed of this webhook, ever: the next one's copies carry it plus one (x-resend), so the
-- delivery log orders each resend's attempts after the earlier ones without a clock.
ALTER TABLE failed_webhooks ADD COLUMN resend_count integer NOT NULL DEFAULT 0;
