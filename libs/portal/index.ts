/** The merchant portal's own state: single-use links, sessions, and the overview's health numbers. */
export {
  keyDigestOf,
  linkLifetimeMs,
  PORTAL_PERMISSIONS,
  PortalLinkError,
  type PortalPermission,
  type PortalSession,
  PortalSessions,
  TokenSigner,
} from './sessions.js';
export { type EndpointHealth, endpointHealth } from './health.js';
