-- A set-aside entry of the delivery log is known by its place in its stream and by what it held, not
-- by its place alone: an operator who deletes the deliveries stream starts its offsets over, and an
-- entry set aside at a place one was set aside at before (rows are kept DELIVERY_LOG_RETENTION) was
-- dropped as its repeat, though the recorder logged it set aside. Read again after a crash (before
-- its batch's offset was stored), an entry has the same place and the same content: still one row.
-- Releases before it insert with ON CONFLICT DO NOTHING, which any unique index serves.
-- runs with releases from: 0026
ALTER TABLE delivery_log_quarantine DROP CONSTRAINT delivery_log_quarantine_pkey;
CREATE UNIQUE INDEX delivery_log_quarantine_entry ON delivery_log_quarantine (stream, stream_offset, position, md5(content));
