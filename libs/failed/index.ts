export * from './entries.js';
export { appendResolution, failureEntryHeaders, type FailureFacts } from './append.js';
export { EntryExpiredError, readEntriesAt, readEntryAt } from './reader.js';
export { FailedIndex, type Hold } from './failed-index.js';
export { EventNotSubscribedError, NothingToResendError, type ResendFilter, ResendInProgressError, ResendOutcomeUnknownError, ResendService } from './resend.js';
export { type FailureRecord, failedAtMs, failureRecordOf } from './failure-record.js';
export { readFailures, type SnapshotOptions } from './snapshot.js';
export { EntrySpool, type EntrySpoolOptions, type SpooledEntry } from './entry-spool.js';
