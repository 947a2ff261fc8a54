-- The merchant directory's cursor never goes back (issue 53). A deleted merchant leaves a tombstone
-- for a day (a digest of its id and its last version), by which every program forgets it and a
-- merchant created again with that id goes on from that version.
CREATE TABLE merchant_tombstones (
  id_digest text PRIMARY KEY,
  version bigint NOT NULL,
  change_xid xid8 NOT NULL DEFAULT pg_current_xact_id(),
  deleted_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX merchant_tombstones_changes ON merchant_tombstones (change_xid);
-- An endpoint's failing clock (auto-disable), outside the merchant's versioned row: a clock write
-- neither bumps the admin ETag nor makes every program read and open the merchant again.
CREATE TABLE endpoint_health (
  merchant_id text PRIMARY KEY,
  url text NOT NULL,
  failing_since timestamptz,
  last_failure_at timestamptz,
  change_xid xid8 NOT NULL DEFAULT pg_current_xact_id()
);
CREATE INDEX endpoint_health_changes ON endpoint_health (change_xid);
