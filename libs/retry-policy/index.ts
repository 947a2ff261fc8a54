export { RetryPolicy } from './policy.js';
export { retryAfterMs } from './retry-after.js';
export { parseRetrySchedule } from './schedule.js';
