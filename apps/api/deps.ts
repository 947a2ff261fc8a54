import type { Registry } from 'prom-client';
import type { DeliveryLogQueries, LogHealthState, Queryable } from '../../libs/delivery-store/index.js';
import type { ResendService } from '../../libs/failed/index.js';
import type { Logger } from '../../libs/logger/index.js';
import type { MerchantDirectory, MerchantSettings } from '../../libs/merchants/index.js';
import type { Authenticator } from './auth.js';
import type { KeyedConcurrency } from './concurrency.js';
import type { PortalDeps } from './portal/deps.js';
import type { RateLimiter, ReturningLimiter } from './rate-limit.js';

/** What the API's apps are made of (program.ts opens them). */
export interface ApiDeps {
  auth: Authenticator;
  resend: ResendService;
  limiter: RateLimiter;
  /** The portal's writes per merchant, apart from its API budget, and its link exchanges per address. */
  portalLimits: { settings: ReturningLimiter; tests: RateLimiter; recover: RateLimiter; address: RateLimiter };
  /** Express's `trust proxy` (TRUST_PROXY): which proxies may name the client in X-Forwarded-For. */
  trustProxy?: number | string[];
  logger: Logger;
  brokerConnected: () => boolean;
  registry: Registry;
  /** False when METRICS_PORT, or ADMIN_PORT, gives /metrics, or /admin, a port of its own. */
  serveMetrics: boolean;
  serveAdmin: boolean;
  merchants: MerchantDirectory;
  settings: MerchantSettings;
  audit: Queryable;
  /** The delivery log's reads, and /readyz's view of it; absent with DELIVERY_LOG=off. */
  log?: DeliveryLogQueries;
  logHealth?: () => LogHealthState;
  /** Per merchant: log reads per minute, and log reads in flight at once. */
  logLimiter: RateLimiter;
  logConcurrency: KeyedConcurrency;
  /** Whether PostgreSQL answered its last check (every few seconds, on a connection of its own). */
  databaseReachable: () => boolean;
  /** Merchants whose newest row this replica cannot open (a key it lacks): not ready while there are any. */
  merchantsUnreadable: () => number;
  portal: PortalDeps;
}
