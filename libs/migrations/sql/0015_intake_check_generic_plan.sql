-- intake_check (0012) keeps one plan for the session, as webhook_order_step does (0010): PL/pgSQL
-- plans its statement anew for each of the first five calls and then keeps re-planning it for every
-- call whenever those custom plans looked cheaper than the generic one, which a batch's arrays of
-- varying length made it do in some sessions and not others. Re-planned, a check cost PostgreSQL
-- ~550 µs a statement at 1-24 keys; with the generic plan ~220 µs (BENCHMARKS.md section 20). Without
-- sequential scans: the plan is made once, perhaps while a day's partition is still empty, and kept
-- while the partition grows to the day's keys; a key is found by its primary key on every day.
ALTER FUNCTION intake_check(text[], text[], float8, text[], text[]) SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION intake_check(text[], text[], float8, text[], text[]) SET enable_seqscan = off;
