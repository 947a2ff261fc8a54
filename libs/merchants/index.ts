export { type MerchantDirectory, activeWebhook, graceSecrets, receivesEvent, signingSecrets } from './directory.js';
export { FileMerchantDirectory, MerchantsFileError } from './file-directory.js';
export { type GraceSecret, MAX_GRACE_SECRETS, type Merchant, type MerchantWebhook, type MerchantsFile, WEBHOOK_SECRET, merchantSchema, merchantsFileSchema, webhookEventsSchema } from './schema.js';
export {
  BrokerMerchantDirectory,
  DirectoryNotReadyError,
  IDEMPOTENCY_WINDOW_MS,
  IdempotencyKeyReusedError,
  type BrokerDirectoryOptions,
  type IdempotentWrite,
  type SettingsChange,
} from './broker-directory.js';
export {
  InvalidIdempotencyKeyError,
  InvalidSettingsError,
  type MerchantInput,
  type MerchantPatch,
  MerchantNotFoundError,
  MerchantSettings,
  type MerchantView,
  PublicKeyTakenError,
  type RotationResult,
  type SettingsResult,
  TooManySecretsError,
  type UrlPolicy,
  WebhookNotSetUpError,
  checkWebhookUrl,
  firstIssue,
  merchantInputSchema,
  merchantPatchSchema,
  rotateInputSchema,
  viewOf,
} from './settings.js';
