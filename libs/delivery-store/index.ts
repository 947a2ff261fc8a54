/** The delivery log's PostgreSQL side: the recorder of the deliveries stream, and the API's and the CLI's reads. */
export { type Database, type Listener, openPglite, openPostgres, type PostgresOptions, type Queryable, type Session } from './database.js';
export { keepListening, type Listening } from './listening.js';
export { type DeliveryLogQueries, deliveryLogQueries } from './queries.js';
export { isStorableFeedCursor, isStorableText, isStorableTime } from './queries.js';
export { InvalidCursorError, InvalidFilterError, LogQueryTimeoutError, LogUnavailableError } from './queries.js';
export { isLockRefused, isPrivilegeRefused, isReadOnly, isTransient } from './refusals.js';
export { erasedMerchantSql } from './erased.js';
export { DeliveryLogRecorder } from './recorder.js';
export { dropExpiredPartitions } from './schema.js';
export { onEndpoint, type WebhookDetail, type WebhookFilters, type WebhookSummary } from './views.js';
export { LogHealth, type LogHealthState } from './health.js';
