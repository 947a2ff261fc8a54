import type { Merchant, MerchantWebhook } from './schema.js';

/**
 * Where merchants and their webhook settings come from: a JSON file (FileMerchantDirectory) or
 * the merchants stream fed by the admin API (BrokerMerchantDirectory).
 */
export interface MerchantDirectory {
  byId(id: string): Merchant | undefined;
  byPublicKey(publicKey: string): Merchant | undefined;
  close(): Promise<void>;
}

/** Returns the merchant's webhook only when it is set up and enabled (spec 6.3). */
export function activeWebhook(merchant: Merchant): MerchantWebhook | undefined {
  return merchant.webhook?.enabled ? merchant.webhook : undefined;
}

/** Whether the webhook's event filter lets this event through (no filter: every event). */
export function receivesEvent(webhook: MerchantWebhook, event: string): boolean {
  return webhook.events === undefined || (webhook.events as readonly string[]).includes(event);
}

/** The secrets to sign with now: the current one, and the previous one during its rotation grace. */
export function signingSecrets(webhook: MerchantWebhook, now: Date): string[] {
  const previous = webhook.previousSecret;
  if (previous && Date.parse(previous.expiresAt) > now.getTime()) return [webhook.secret, previous.secret];
  return [webhook.secret];
}
