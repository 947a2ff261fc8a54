-- 0001: the whole schema of the first release. Applied by `webhooks migrate` (libs/migrations), in
-- one transaction; never edited once released (its checksum is recorded): a change is a new file.

-- The merchants (libs/merchants/rows.ts). A merchant is one row: its settings as JSON without the
-- secrets, the secrets sealed apart (SecretBox), a version that counts its changes (compare-and-set,
-- the admin API's ETag) and the id of the transaction that last changed it (change_xid), by which
-- every program's cache finds what changed since it last looked. The limits shared by API replicas
-- and the admin writes' Idempotency-Keys live beside them.
CREATE TABLE merchants (
  id text PRIMARY KEY,
  public_key text NOT NULL UNIQUE,
  webhook jsonb,
  secrets text,
  version bigint NOT NULL,
  change_xid xid8 NOT NULL DEFAULT pg_current_xact_id(),
  updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX merchants_changes ON merchants (change_xid);
CREATE TABLE merchant_idempotency (
  key text PRIMARY KEY,
  fingerprint text NOT NULL,
  result text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  -- So that `webhooks merchants delete` finds a merchant's keys.
  merchant_id text
);
CREATE INDEX merchant_idempotency_age ON merchant_idempotency (created_at);
CREATE TABLE rate_limits (
  key text PRIMARY KEY,
  tat timestamptz NOT NULL
);

-- The audit trail of merchant settings (libs/merchants/audit.ts): who changed what, when, from
-- where; one row per change, written in the same transaction as the change it describes.
CREATE TABLE merchant_audit (
  id bigserial PRIMARY KEY,
  merchant_id text NOT NULL,
  at timestamptz NOT NULL DEFAULT now(),
  actor text NOT NULL,
  action text NOT NULL,
  changes jsonb NOT NULL,
  address text
);
CREATE INDEX merchant_audit_merchant ON merchant_audit (merchant_id, id DESC);

-- The merchant portal's links and sessions (libs/portal/sessions.ts): digests only, never a token.
CREATE TABLE portal_links (
  token_hash text PRIMARY KEY,
  merchant_id text NOT NULL,
  permissions text[] NOT NULL,
  key_digest text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  expires_at timestamptz NOT NULL,
  redeemed_at timestamptz
);
CREATE INDEX portal_links_expiry ON portal_links (expires_at);
CREATE INDEX portal_links_merchant ON portal_links (merchant_id);
CREATE TABLE portal_sessions (
  session_hash text PRIMARY KEY,
  merchant_id text NOT NULL,
  link_hash text NOT NULL,
  permissions text[] NOT NULL,
  csrf_token text NOT NULL,
  key_digest text NOT NULL,
  link_created_at timestamptz NOT NULL,
  last_seen_at timestamptz NOT NULL DEFAULT now(),
  expires_at timestamptz NOT NULL
);
CREATE INDEX portal_sessions_expiry ON portal_sessions (expires_at);
CREATE INDEX portal_sessions_merchant ON portal_sessions (merchant_id);
CREATE INDEX portal_sessions_link ON portal_sessions (link_hash);

-- The delivery log (libs/delivery-store). Records are partitioned by day (their time), so
-- DELIVERY_LOG_RETENTION drops whole partitions; the recorder creates each day's partition as
-- records arrive (data, not schema). A webhook is one row, keyed by merchant and webhook id; it
-- expires by its last record. `seq`, the feed's cursor, is derived from the deliveries stream's
-- offset of the webhook's first record (seq_base + offset * 1024 + the record's place + 1), never
-- from a sequence, so rows a PostgreSQL crash takes back are stored again with the same seq.
CREATE TABLE delivery_log_offsets (
  stream text PRIMARY KEY,
  next_offset bigint NOT NULL,
  -- When the stream ended where the log now holds everything (null: not measured yet).
  caught_up_at timestamptz,
  seq_base bigint NOT NULL DEFAULT 0,
  -- The fingerprint of the entry at next_offset - 1: another one there means the stream was
  -- deleted, declared again and written past that offset meanwhile.
  last_entry text
);

CREATE TABLE delivery_webhooks (
  merchant_id text NOT NULL,
  webhook_id text NOT NULL,
  first_seen_at timestamptz NOT NULL,
  seq bigint NOT NULL,
  event text NOT NULL,
  refs text[] NOT NULL,
  -- merchant id, unit separator, reference: one GIN lookup finds a merchant's reference (a GIN
  -- on refs alone would match every merchant's, then filter).
  merchant_refs text[] NOT NULL,
  payload jsonb,
  status text NOT NULL,
  attempts integer NOT NULL,
  first_attempt_at timestamptz,
  last_attempt_at timestamptz,
  last_http_status integer,
  last_error text,
  next_attempt_at timestamptz,
  last_record_at timestamptz NOT NULL,
  PRIMARY KEY (merchant_id, webhook_id)
);
CREATE INDEX delivery_webhooks_newest ON delivery_webhooks (merchant_id, first_seen_at DESC, webhook_id DESC);
CREATE INDEX delivery_webhooks_feed ON delivery_webhooks (merchant_id, seq);
CREATE INDEX delivery_webhooks_expiry ON delivery_webhooks (last_record_at);
-- fastupdate off: with it, every reference search read the whole pending list (60,000 entries:
-- p50 1.6 -> 4.9 ms), and a row holds one or two keys, so inserting straight into the index costs
-- the recorder nothing measurable.
CREATE INDEX delivery_webhooks_refs ON delivery_webhooks USING gin (merchant_refs) WITH (fastupdate = off);
-- The retry safety net (libs/retry-net): webhooks overdue in their tier are found by this partial
-- index (only the retrying ones, a small share of the log), and each wait (attempts made, due
-- time) is claimed once, by the net republishing a copy or by its original arriving late:
-- whichever inserts the row first; the other is dropped. Kept as long as the log.
CREATE INDEX delivery_webhooks_overdue ON delivery_webhooks (next_attempt_at) WHERE status = 'retrying';
CREATE TABLE retry_claims (
  merchant_id text NOT NULL,
  webhook_id text NOT NULL,
  attempt integer NOT NULL,
  due_at timestamptz NOT NULL,
  -- 'net' (a copy is republished) or 'original' (the late original is delivered).
  claimed_by text NOT NULL,
  claimed_at timestamptz NOT NULL DEFAULT now(),
  -- When the net's copy was confirmed in dispatch; a net claim without it for long is taken again.
  copied_at timestamptz,
  PRIMARY KEY (merchant_id, webhook_id, attempt, due_at)
);
CREATE INDEX retry_claims_expiry ON retry_claims (claimed_at);
CREATE TABLE delivery_records (
  id uuid NOT NULL,
  at timestamptz NOT NULL,
  merchant_id text NOT NULL,
  webhook_id text NOT NULL,
  outcome text NOT NULL,
  attempt_number integer NOT NULL,
  started_at timestamptz,
  duration_ms integer,
  http_status integer,
  error text,
  response_body text,
  reason text,
  next_attempt_at timestamptz,
  PRIMARY KEY (id, at)
) PARTITION BY RANGE (at);
CREATE INDEX delivery_records_webhook ON delivery_records (merchant_id, webhook_id, at);
-- Records PostgreSQL refused (a value it cannot hold, a size over its limits): set aside with
-- where they were in the stream, so that the rest of the log keeps flowing and operators see them.
CREATE TABLE delivery_log_quarantine (
  stream text NOT NULL,
  stream_offset bigint NOT NULL,
  -- The record's place in its stream message (-1: the whole message).
  position integer NOT NULL,
  quarantined_at timestamptz NOT NULL DEFAULT now(),
  merchant_id text,
  webhook_id text,
  error text NOT NULL,
  -- The record as JSON text (NUL removed), or the message's first bytes when it was not records.
  content text NOT NULL,
  PRIMARY KEY (stream, stream_offset, position)
);
-- The list's status and event filters, in its order: a page reads its rows and stops, where the
-- merchant's newest-first index alone read every row of the merchant to find the few that match.
CREATE INDEX delivery_webhooks_status ON delivery_webhooks (merchant_id, status, first_seen_at DESC, webhook_id DESC);
CREATE INDEX delivery_webhooks_event ON delivery_webhooks (merchant_id, event, first_seen_at DESC, webhook_id DESC);
-- The failure index (libs/failed/store.ts): one row per failed webhook, and its resend's claim.
CREATE TABLE failed_webhooks (
  merchant_id text NOT NULL,
  webhook_id text NOT NULL,
  failed_at timestamptz NOT NULL,
  event text NOT NULL,
  -- merchant id, unit separator, reference: as delivery_webhooks.merchant_refs.
  merchant_refs text[] NOT NULL,
  reason text,
  attempts integer NOT NULL DEFAULT 0,
  last_status integer,
  last_error text,
  -- The failed message's body and headers; null when only the recorder wrote the row (the
  -- dispatcher could not reach the database): a resend then sends the log's copy of the payload.
  content text,
  headers jsonb,
  claim_id uuid,
  claimed_at timestamptz,
  resent_at timestamptz,
  -- Resends of this webhook in the 24 hours from resends_since, whatever failures came between:
  -- a merchant cannot turn one webhook into a stream of signed POSTs.
  resends integer NOT NULL DEFAULT 0,
  resends_since timestamptz,
  PRIMARY KEY (merchant_id, webhook_id)
);
CREATE INDEX failed_webhooks_refs ON failed_webhooks USING gin (merchant_refs) WITH (fastupdate = off);
CREATE INDEX failed_webhooks_open ON failed_webhooks (merchant_id, failed_at) WHERE resent_at IS NULL;
CREATE INDEX failed_webhooks_expiry ON failed_webhooks (failed_at);
