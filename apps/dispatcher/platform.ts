import { PLATFORM_MERCHANT_ID } from '../../libs/contracts/index.js';
import type { Merchant } from '../../libs/merchants/index.js';

/** The platform's one endpoint's id: its waits and failures are keyed by it like a merchant's. */
export const PLATFORM_ENDPOINT_ID = 'ep_platform';

/**
 * The platform's endpoint: OPERATIONAL_WEBHOOK_URL signed with OPERATIONAL_WEBHOOK_SECRET, under a
 * reserved merchant id, built from the dispatcher's configuration (not a row: the admin API, the
 * CLI and the portal cannot see or change it). The operational exchange is bound to dispatch while
 * it is set, and the dispatcher delivers each event to it as a merchant's webhook: same signing,
 * waits, circuit, delivery log and `failed`. Without a URL it has no webhook, so an event
 * still bound to dispatch is skipped (recorded), never parked.
 */
export function platformEndpoint(url: string | undefined, secret: string | undefined): Merchant {
  return {
    id: PLATFORM_MERCHANT_ID,
    publicKey: PLATFORM_MERCHANT_ID,
    endpoints: url !== undefined && secret !== undefined ? [{ id: PLATFORM_ENDPOINT_ID, url, secret, enabled: true }] : [],
  };
}
