export { type MerchantDirectory, activeWebhook, receivesEvent, signingSecrets } from './directory.js';
export { FileMerchantDirectory, MerchantsFileError } from './file-directory.js';
export { type Merchant, type MerchantWebhook, type MerchantsFile, WEBHOOK_SECRET, merchantSchema, merchantsFileSchema, webhookEventsSchema } from './schema.js';
export { BrokerMerchantDirectory, DirectoryNotReadyError, type BrokerDirectoryOptions, type SettingsChange } from './broker-directory.js';
export {
  InvalidSettingsError,
  type MerchantInput,
  MerchantNotFoundError,
  MerchantSettings,
  type MerchantView,
  PublicKeyTakenError,
  type UrlPolicy,
  WebhookNotSetUpError,
  checkWebhookUrl,
  firstIssue,
  merchantInputSchema,
  rotateInputSchema,
  viewOf,
} from './settings.js';
