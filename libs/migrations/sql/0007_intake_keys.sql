-- Idempotent intake (issue 55): one row per intake key (the upstream messageId, else the body's
-- digest: the webhook id) first seen in the last INTAKE_DEDUPE_WINDOW. The dispatcher inserts it
-- when it takes an upstream message (INSERT ... ON CONFLICT, batched); a repeat of a live key is
-- acked and not delivered again, except a redelivered copy whose webhook the delivery log does not
-- hold (the first copy's own redelivery after a crash). `duplicates` and `last_duplicate_at` are
-- what the log shows on the original.
-- Partitioned by the UTC day of first sight: keys expire by dropping whole day partitions (the
-- dispatchers make each day's partition ahead and drop those past the window), never by deletes.
-- A unique key of a partitioned table must hold its partition key, so `day` is in the primary
-- key; a key seen on an earlier day is found by a lookup, not by the constraint.
CREATE TABLE intake_keys (
  day timestamptz NOT NULL,
  merchant_id text NOT NULL,
  webhook_id text NOT NULL,
  first_seen_at timestamptz NOT NULL DEFAULT now(),
  duplicates integer NOT NULL DEFAULT 0,
  last_duplicate_at timestamptz,
  PRIMARY KEY (merchant_id, webhook_id, day)
) PARTITION BY RANGE (day);
