/** How a DeliveryLogRecorder is set (and its bounds' defaults), and what it reports. */
import type { Replication } from '../topology/index.js';

export interface RecorderOptions {
  prefix: string;
  replication?: Replication;
  /** DELIVERY_LOG_RETENTION: day partitions older than this are dropped. */
  retentionMs: number;
  /** Stream messages per transaction at most (each holds up to 200 records)... */
  maxMessages?: number;
  /** ...and their bytes at most (at least one message): PostgreSQL refuses a jsonb over 255 MB. */
  maxBatchBytes?: number;
  /** A batch is written this long after its first message at the latest. */
  flushAfterMs?: number;
  /** How often a standby tries to take the lock, and a leader without a database tries again. */
  retryMs?: number;
  /** Stream messages handed out before an ack... */
  prefetch?: number;
  /** ...and the bytes read and not stored at most: past this the recorder stops reading until it stored half. */
  bufferBytes?: number;
  /** How often the leader appends a checkpoint to learn how far behind the stream's end it is. */
  checkpointEveryMs?: number;
  /** A checkpoint not read back within this, while nothing else arrives, means the consumer stopped: subscribe again. */
  livenessDeadlineMs?: number;
  /** A single record whose statement times out this many times in a row is set aside. */
  timeoutsBeforeQuarantine?: number;
}

/** What a recorder reports, for metrics and tests. */
export interface RecorderState {
  leading: boolean;
  /** Stream messages read and not yet stored. */
  pending: number;
  /** Their bytes. */
  pendingBytes: number;
  /** When the stream last ended where the log now holds everything (ms since epoch), measured by a checkpoint. */
  caughtUpAt?: number;
  recordsStored: number;
  /** Entries that are not records (not JSON, not the schema): set aside in the quarantine table. */
  rejected: number;
  /** Records PostgreSQL refused: set aside in the quarantine table. */
  quarantined: number;
  /** Times the consumer was subscribed again: it stopped receiving, or reading paused for memory. */
  resubscribed: number;
}

/**
 * What a catch-up holds: the read-ahead's bytes, and a batch's (decoded, serialised and sent while
 * the next is prepared, so several copies of it live at once). Measured in BENCHMARKS 8b.
 */
export const BUFFER_BYTES = 16 * 1024 * 1024;
export const BATCH_BYTES = 4 * 1024 * 1024;
