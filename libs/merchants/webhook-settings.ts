import type { Queryable } from '../delivery-store/index.js';
import type { MerchantWebhook } from './schema.js';

/** What a merchant's row says of its webhook without opening a secret: whether it is on, and its events filter. */
export type WebhookSettings = Pick<MerchantWebhook, 'enabled' | 'events'>;

/**
 * One merchant's webhook settings as the programs' directories hold them, read from its row
 * (the secrets are sealed apart, so no SECRETS_KEY is needed): undefined when there is no such
 * merchant, null when it has no webhook.
 */
export async function webhookSettingsOf(db: Queryable, merchantId: string): Promise<WebhookSettings | null | undefined> {
  const { rows } = await db.query<{ webhook: WebhookSettings | null }>('SELECT webhook FROM merchants WHERE id = $1', [merchantId]);
  return rows.length === 0 ? undefined : rows[0]!.webhook;
}
