-- Which resend's copy a failure is (0: the webhook's own attempts), so that a later failure is told
-- by that number first and by failed_at only within it: failed_at is the failing dispatcher's clock,
-- and a resent copy failing again on a dispatcher whose clock is behind the first one's was taken
-- for the older failure (left resent: the next resend answered 404). A constant default: no rewrite.
ALTER TABLE failed_webhooks ADD COLUMN failed_resend integer NOT NULL DEFAULT 0;
