-- A wait's hand-back is a new message each time, which dispatch's delivery limit never counts: a
-- wait whose end PostgreSQL refused (or whose attempt killed its dispatcher) was handed back every
-- WAIT_LEASE, parked or delivered again each time, for ever. `takes`: the takes of its hand-backs
-- (each come to its attempt) since an attempt last rewrote the row; past WAIT_TAKE_LIMIT the take
-- leaves the row out of the pick (pick_at NULL) and its copy is parked (wait-not-ended). Additive
-- (a column with a constant default, no rewrite): the programs of 0026 run on it unchanged, neither
-- counting nor resetting it (a hand-back's take and its rewrite are the one dispatcher's that took it).
-- runs with releases from: 0026
ALTER TABLE webhook_waits ADD COLUMN takes integer NOT NULL DEFAULT 0;
