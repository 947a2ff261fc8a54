-- A wait's hand is drawn from one sequence for every row, not counted from 0 per row: a row that
-- ended (its webhook delivered or failed) and a new row of its key written later (a resend that
-- waits again, a copy moved back from invalid) counted the same hands again, and a hand-back of
-- the first row still about (behind a backlog, parked and moved back) was taken by the new row as
-- its current hand and sent beside the new row's own. Integer as the column (no rewrite of the
-- table), cycling: a hand comes back only after 2^31 others. It starts above any hand counted
-- before it, so a copy of a row ended before this migration meets none of the first it draws.
-- Releases before it insert without a hand (they get one drawn) and count on from it (hand + 1),
-- which stays far below the maximum for a billion draws.
-- runs with releases from: 0026
CREATE SEQUENCE webhook_wait_hands AS integer MINVALUE 1 START WITH 1073741824 CYCLE;
ALTER TABLE webhook_waits ALTER COLUMN hand SET DEFAULT nextval('webhook_wait_hands');
