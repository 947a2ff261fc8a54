import { PLATFORM_MERCHANT_ID } from '../../libs/contracts/index.js';
import type { Merchant } from '../../libs/merchants/index.js';

export const PLATFORM_ENDPOINT_ID = 'ep_platform';

/**
 * The platform's endpoint (OPERATIONAL_WEBHOOK_URL), delivered to as a merchant's webhook under a
 * reserved id, from config: not a row, so no API can see or change it. Without a URL it has no
 * endpoint, so an event still bound to dispatch is skipped (recorded), never parked.
 */
export function platformEndpoint(url: string | undefined, secret: string | undefined): Merchant {
  return {
    id: PLATFORM_MERCHANT_ID,
    publicKey: PLATFORM_MERCHANT_ID,
    endpoints: url !== undefined && secret !== undefined ? [{ id: PLATFORM_ENDPOINT_ID, url, secret, enabled: true }] : [],
  };
}
