import type { Merchant } from './schema.js';

/**
 * Where merchants and their webhook settings come from. The file-backed one is the first;
 * a directory fed by the dashboard can replace it without touching the apps.
 */
export interface MerchantDirectory {
  byId(id: string): Merchant | undefined;
  byPublicKey(publicKey: string): Merchant | undefined;
  close(): Promise<void>;
}

/** Returns the merchant's webhook only when it is set up and enabled (spec 6.3). */
export function activeWebhook(merchant: Merchant): NonNullable<Merchant['webhook']> | undefined {
  return merchant.webhook?.enabled ? merchant.webhook : undefined;
}
