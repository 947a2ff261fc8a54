-- A dead merchant costs rows, not broker churn (issue 54): while a merchant's circuit is open its
-- waits are parked in their rows instead of being handed back to `dispatch` one by one to be
-- postponed again. `wait_circuits` holds one row per merchant whose circuit a dispatcher found
-- open: waits written or falling due while it exists are parked (out of the pick until the end of
-- their schedule's span, `span_ends_at`, when they are handed back to fail), and the scheduler
-- hands back one of them, the probe, each time `probe_at` comes. A delivered wait of the merchant
-- deletes the row and unparks the rest. Keyed by merchant, not URL: a wait row knows its merchant,
-- and a merchant has one webhook URL.
CREATE TABLE wait_circuits (
  merchant_id text PRIMARY KEY,
  probe_at timestamptz NOT NULL
);
ALTER TABLE webhook_waits ADD COLUMN parked boolean NOT NULL DEFAULT false, ADD COLUMN span_ends_at timestamptz;
-- The probe (a merchant's oldest parked wait) and the unpark of all of them, without reading the rest.
CREATE INDEX webhook_waits_parked ON webhook_waits (merchant_id, due_at) WHERE parked;
