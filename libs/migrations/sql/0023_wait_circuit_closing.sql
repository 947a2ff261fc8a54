-- A circuit's close is one row: `closing` marks it, and the schedulers make its parked waits due
-- again a batch a statement, then delete the row. Made due in the statement that closed it, a dead
-- endpoint's million parked waits held every other wait of the dispatcher's batch behind them for
-- as long as that took, and a close longer than the waits pool's read timeout never committed (the
-- batch was tried again for ever). While `closing`, the row parks nothing; a failure that opens the
-- circuit again turns it back. A constant default: no rewrite.
ALTER TABLE wait_circuits ADD COLUMN closing boolean NOT NULL DEFAULT false;
CREATE INDEX wait_circuits_closing ON wait_circuits (merchant_id, endpoint_id) WHERE closing;
