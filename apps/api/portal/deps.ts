import type { UpstreamMessage } from '../../../libs/contracts/index.js';
import type { EndpointHealth, PortalSessions } from '../../../libs/portal/index.js';

/** What the merchant portal needs beyond the API's own dependencies. */
export interface PortalDeps {
  /** Links and sessions, in the delivery log's PostgreSQL; absent with DELIVERY_LOG=off (the portal answers 503). */
  sessions?: PortalSessions;
  health(merchantId: string): Promise<EndpointHealth>;
  /** Publishes as upstream does; `test`: x-test-event (one attempt), `endpointId`: x-endpoint-id (that endpoint only). */
  publish(message: UpstreamMessage, options?: { test?: boolean; endpointId?: string }): Promise<{ messageId: string }>;
  /** Where links point and the portal's origin: PORTAL_PUBLIC_URL (without it, in dev mode, this API's port on 127.0.0.1); never what a request says. */
  baseUrl: string;
  /** Secure cookies whatever the request says: outside development mode, and whenever PORTAL_PUBLIC_URL is https. */
  secureCookies: boolean;
  /** The cookie named `__Host-…` with Path=/ (PORTAL_PUBLIC_URL is https): no subdomain can set or shadow it. */
  hostPrefixCookie: boolean;
  /** PORTAL_FRAME_ANCESTORS: origins allowed to embed the portal in an iframe, beyond its own. */
  frameAncestors: string[];
}
