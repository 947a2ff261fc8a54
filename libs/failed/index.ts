export * from './entries.js';
export { appendResolution } from './append.js';
export { EntryExpiredError, readEntryAt } from './reader.js';
export { FailedIndex } from './failed-index.js';
export { NothingToResendError, ResendService } from './resend.js';
export { type FailureRecord, failedAtMs, failureRecordOf } from './failure-record.js';
export { readFailures, type SnapshotOptions } from './snapshot.js';
