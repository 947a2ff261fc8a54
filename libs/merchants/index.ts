export { type MerchantDirectory, activeWebhook } from './directory.js';
export { FileMerchantDirectory, MerchantsFileError } from './file-directory.js';
export { type Merchant, type MerchantsFile, merchantSchema, merchantsFileSchema } from './schema.js';
