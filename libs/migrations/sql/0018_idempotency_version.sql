-- The version a write under an Idempotency-Key made: a repeat answers that ETag, the first answer's,
-- instead of the version its replica holds when the repeat comes (older on a replica not yet
-- notified; newer after another write, an ETag newer than the body it comes with, which would let a
-- dashboard's next If-Match overwrite a change it never saw). Keys written before this have none:
-- their repeats answer the replica's version, as before.
ALTER TABLE merchant_idempotency ADD COLUMN version bigint;
