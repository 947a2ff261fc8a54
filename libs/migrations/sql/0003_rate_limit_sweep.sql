-- The sweep of shared limit rows whose bucket is full again (apps/api/rate-limit.ts) finds them by
-- tat, where it read every row of the table.
CREATE INDEX rate_limits_tat ON rate_limits (tat);
