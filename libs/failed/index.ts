export { failureEntryHeaders } from './failure-headers.js';
export { EventNotSubscribedError, FailureIndexUnavailableError, NothingToResendError, ResendInProgressError, ResendLimitError, ResendOutcomeUnknownError, ResendService, ResendStoppedError } from './resend.js';
export { EndpointDeletedError, receiverOf, type ResendTarget, WebhookDisabledError } from './resend.js';
export { CLAIM_LEASE_MS, RESENDS_PER_WEBHOOK_PER_DAY, FailedStore, type FailureRow, INDEX_FROM_LOG } from './store.js';
