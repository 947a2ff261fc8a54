-- The releases each migration runs with: the value of its `-- runs with releases from: NNNN` line,
-- recorded by `webhooks migrate` (NULL: only releases that know it, as every file before this one).
-- A program whose latest migration is older than the database's reads it at start-up and runs
-- beside the newer migrations only if each declares a version no newer than its own
-- (libs/migrations/gate.ts). Nullable, no default: no rewrite, and the programs before it never
-- name the column.
-- runs with releases from: 0024
ALTER TABLE schema_migrations ADD COLUMN runs_with_from integer;
