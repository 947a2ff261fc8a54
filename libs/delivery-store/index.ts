/**
 * The delivery log's PostgreSQL side: the schema, the recorder that materialises the deliveries
 * stream (one leader at a time), and the reads the API and the CLI make.
 */
export { type Database, type Listener, openPglite, openPostgres, type PostgresOptions, type Queryable, type Session } from './database.js';
export { isStorableFeedCursor, isStorableText, isStorableTime, MAX_FEED_CURSOR } from './bounds.js';
export { InvalidCursorError, InvalidFilterError, LogQueryTimeoutError, LogUnavailableError } from './errors.js';
export { caughtUpAt, storedOffset } from './materialise.js';
export { deliveryLogQueries, type DeliveryLogQueryOptions, FEED_PAGE_BYTES } from './queries.js';
export { DeliveryLogRecorder, type RecorderOptions, type RecorderState } from './recorder.js';
export { dropExpiredPartitions } from './schema.js';
export type { DeliveryLogQueries, FeedEvent, RecordView, WebhookDetail, WebhookFilters, WebhookSummary } from './views.js';
export { LogHealth, type LogHealthState } from './health.js';
