import { PLATFORM_MERCHANT_ID } from '../../libs/contracts/index.js';
import type { Merchant } from '../../libs/merchants/index.js';

export const PLATFORM_ENDPOINT_ID = 'ep_platform';

/**
 * The platform's endpoint (OPERATIONAL_WEBHOOK_URL), under a reserved id, from config: no API can see
 * or change it. Without a URL it has none, so an event still bound to dispatch is skipped, never parked.
 */
export function platformEndpoint(url: string | undefined, secret: string | undefined): Merchant {
  return {
    id: PLATFORM_MERCHANT_ID,
    publicKey: PLATFORM_MERCHANT_ID,
    endpoints: url !== undefined && secret !== undefined ? [{ id: PLATFORM_ENDPOINT_ID, url, secret, enabled: true }] : [],
  };
}
