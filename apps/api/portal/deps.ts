import type { UpstreamMessage } from '../../../libs/contracts/index.js';
import type { EndpointHealth, PortalSessions } from '../../../libs/portal/index.js';

/** What the merchant portal needs beyond the API's own dependencies. */
export interface PortalDeps {
  /** Absent with DELIVERY_LOG=off: the portal answers 503. */
  sessions?: PortalSessions;
  health(merchantId: string): Promise<EndpointHealth>;
  /**
   * Publishes as upstream does; `test`: x-test-event (one attempt), `endpointId`: x-endpoint-id (that endpoint only);
   * past `deadlineMs` without a confirm it rejects with PublishUnconfirmedError.
   */
  publish(message: UpstreamMessage, options?: { test?: boolean; endpointId?: string; deadlineMs?: number }): Promise<{ messageId: string }>;
  /** Where links point and the portal's origin: never what a request says. */
  baseUrl: string;
  secureCookies: boolean;
  /** `__Host-` with Path=/: no subdomain can set or shadow it. */
  hostPrefixCookie: boolean;
  /** PORTAL_FRAME_ANCESTORS. */
  frameAncestors: string[];
}
