export { appendArrived, appendScheduled, type ScheduledRetry } from './journal.js';
export { RESEND_KEY, RetryWatch, type RetryWatchOptions } from './retry-watch.js';
export { readLatestSnapshot, type WatchSnapshot } from './snapshot.js';
