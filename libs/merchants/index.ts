export { type MerchantDirectory, activeWebhook, graceExpiries, graceSecrets, receivesEvent, signingSecrets } from './directory.js';
export { FileMerchantDirectory, MerchantsFileError } from './file-directory.js';
export { DISABLED_REASONS, type DisabledReason, type GraceSecret, MAX_GRACE_SECRETS, type Merchant, type MerchantWebhook, type MerchantsFile, WEBHOOK_SECRET, merchantSchema, merchantsFileSchema, webhookEventsSchema } from './schema.js';
export {
  IDEMPOTENCY_WINDOW_MS,
  IdempotencyKeyReusedError,
  type IdempotentWrite,
  MerchantStoreUnavailableError,
  DEFAULT_POLL_INTERVAL_MS,
  PgMerchantDirectory,
  type PgDirectoryOptions,
  type SettingsChange,
  VersionMismatchError,
  type Written,
} from './pg-directory.js';
export { SecretBox, SecretsKeyError } from './secret-box.js';
export { type Actor, type AuditEntry, listAudit, recordAudit } from './audit.js';
export { resealSecrets, TOMBSTONE_KEEP_MS } from './rows.js';
export { type Health } from './health.js';
export { deleteMerchantData, MERCHANT_TABLES, TABLES_KEPT_AFTER_DELETE, TABLES_WITHOUT_MERCHANT_DATA } from './erase.js';
export {
  DisabledByOperatorError,
  disabledByOperator,
  InvalidIdempotencyKeyError,
  InvalidSettingsError,
  type EndpointTransition,
  MerchantNotFoundError,
  MerchantSettings,
  type MerchantView,
  PublicKeyTakenError,
  type RotationResult,
  type SettingsResult,
  TooManySecretsError,
  type UrlPolicy,
  WebhookNotSetUpError,
  type WriteGuards,
  checkWebhookUrl,
  firstIssue,
  transitionsOf,
  viewOf,
  withStatus,
} from './settings.js';
export { type MerchantInput, type MerchantPatch, merchantInputSchema, merchantPatchSchema, rotateInputSchema } from './settings-input.js';
export { type MerchantStoreConfig, type OpenedMerchants, openMerchants } from './open.js';
export { isUnavailable } from './pg-directory.js';
export { type WebhookSettings, webhookSettingsOf } from './webhook-settings.js';
