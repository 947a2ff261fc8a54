import type { Queryable } from '../delivery-store/index.js';
import type { Endpoint } from './schema.js';

/** What a merchant's row says of an endpoint without opening a secret: whether it is on, and its events filter. */
export type WebhookSettings = Pick<Endpoint, 'id' | 'enabled' | 'events'>;

/**
 * One merchant's endpoints' settings as the programs' directories hold them, read from its row
 * (the secrets are sealed apart, so no SECRETS_KEY is needed): undefined when there is no such
 * merchant.
 */
export async function webhookSettingsOf(db: Queryable, merchantId: string): Promise<WebhookSettings[] | undefined> {
  const { rows } = await db.query<{ endpoints: WebhookSettings[] }>('SELECT endpoints FROM merchants WHERE id = $1', [merchantId]);
  return rows[0]?.endpoints;
}
