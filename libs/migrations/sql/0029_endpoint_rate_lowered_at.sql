-- The adaptive rate's lowering is held for a second after the last lowering, not after the last
-- change: a raise stamped changed_at too, so a 429 within a second of a success's raise was not
-- heard at all, and an endpoint at its capacity kept being raised by whichever answer came first
-- in each second. `lowered_at`: when a 429 or 503 last halved the rate (NULL: a row written by a
-- release before this one, whose changed_at stands in for it). Additive (a nullable column, no
-- rewrite): the programs of 0026 run on it unchanged, lowering and raising on changed_at as before.
-- runs with releases from: 0026
ALTER TABLE endpoint_rates ADD COLUMN lowered_at timestamptz;
