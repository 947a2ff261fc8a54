-- The circuit is its row (wait_circuits), for every dispatcher: each one's breaker follows it
-- (opened and closed there, announced on `wait_circuits`), and the row keeps the cooldown it was
-- opened for, which a failed probe doubles, so a dispatcher that only heard of it (or read it on
-- listening again) knows it too. NULL for a row opened before: the first cooldown.
ALTER TABLE wait_circuits ADD COLUMN cooldown_ms float8;
