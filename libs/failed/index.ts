export { failureEntryHeaders, type FailureFacts } from './failure-headers.js';
export { EventNotSubscribedError, FailureIndexUnavailableError, NothingToResendError, type ResendFilter, ResendInProgressError, ResendLimitError, ResendOutcomeUnknownError, ResendService } from './resend.js';
export { receiverOf, type ResendTarget, WebhookDisabledError } from './resend-target.js';
export { CLAIM_LEASE_MS, RESENDS_PER_WEBHOOK_PER_DAY, type ClaimedFailure, FailedStore, type Failure, type FailureFilter, type FailureRow, INDEX_FROM_LOG, merchantRef } from './store.js';
