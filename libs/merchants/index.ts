export { type MerchantDirectory, graceExpiries, matchingEndpoints, newEndpointId, receivesEvent, signingSecrets } from './directory.js';
export { FileMerchantDirectory, MerchantsFileError } from './file-directory.js';
export { DISABLED_REASONS, type DisabledReason, type Endpoint, ENDPOINT_ID, MAX_ENDPOINTS_PER_MERCHANT, MAX_PER_SECOND_LIMIT, type Merchant, WEBHOOK_SECRET, merchantsFileSchema } from './schema.js';
export {
  IdempotencyKeyReusedError,
  MerchantStoreUnavailableError,
  PgMerchantDirectory,
  VersionMismatchError,
  type Written,
} from './pg-directory.js';
export { SecretBox, SecretsKeyError } from './secret-box.js';
export { type Actor, AuditUnavailableError, listAudit, recordAudit } from './audit.js';
export { resealSecrets } from './rows.js';
export { type Health } from './health.js';
export { deleteMerchantData, MERCHANT_TABLES, TABLES_KEPT_AFTER_DELETE, TABLES_WITHOUT_MERCHANT_DATA } from './erase.js';
export * from './errors.js';
export { firstIssue, GRACE_SECONDS, type MerchantInput, type MerchantPatch, merchantInputSchema, merchantPatchSchema, rotateInputSchema, WEBHOOK_URL_MAX_LENGTH } from './settings-input.js';
export {
  disabledByOperator,
  type EndpointTransition,
  MerchantSettings,
  type MerchantView,
  type RotationResult,
  type SettingsResult,
  type UrlPolicy,
  type WriteGuards,
  checkWebhookUrl,
  transitionsOf,
  viewOf,
  withStatus,
} from './settings.js';
export { currentPerSecondOf, type EndpointRate, endpointRateOf, lowerEndpointRate, MIN_ADAPTIVE_RATE, raiseEndpointRate, withCurrentRate, withEndpointRate } from './endpoint-rate.js';
export { type OpenedMerchants, openMerchants } from './open.js';
export { isUnavailable } from './pg-directory.js';
export { webhookSettingsOf } from './webhook-settings.js';
export { type EndpointCreated, EndpointSettings } from './endpoint-settings.js';
export { type EndpointInput, type EndpointPatch, endpointIdSchema, endpointInputSchema, endpointPatchSchema } from './settings-input.js';
export { type EndpointView, endpointViewOf } from './endpoint-view.js';
