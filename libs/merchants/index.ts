export { type MerchantDirectory, activeWebhook, graceSecrets, receivesEvent, signingSecrets } from './directory.js';
export { FileMerchantDirectory, MerchantsFileError } from './file-directory.js';
export { DISABLED_REASONS, type DisabledReason, type GraceSecret, MAX_GRACE_SECRETS, type Merchant, type MerchantWebhook, type MerchantsFile, WEBHOOK_SECRET, merchantSchema, merchantsFileSchema, webhookEventsSchema } from './schema.js';
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
  type EndpointTransition,
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
  transitionOf,
  viewOf,
  withStatus,
} from './settings.js';
