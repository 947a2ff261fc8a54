/** The delivery log's PostgreSQL side: the recorder of the deliveries stream, and the API's and the CLI's reads. */
export { type Database, type Listener, openPglite, openPostgres, type PostgresOptions, type Queryable, type Session } from './database.js';
export { keepListening, type Listening } from './listening.js';
export { isStorableFeedCursor, isStorableText, isStorableTime } from './bounds.js';
export { InvalidCursorError, InvalidFilterError, LogQueryTimeoutError, LogUnavailableError } from './errors.js';
export { type DeliveryLogQueries, deliveryLogQueries } from './queries.js';
export { isLockRefused, isPrivilegeRefused, isReadOnly, isTransient } from './refusals.js';
export { onEndpoint } from './fold.js';
export { erasedMerchantSql } from './erased.js';
export { DeliveryLogRecorder } from './recorder.js';
export { dropExpiredPartitions } from './schema.js';
export type { WebhookDetail, WebhookFilters, WebhookSummary } from './views.js';
export { LogHealth, type LogHealthState } from './health.js';
