import type { Registry } from 'prom-client';
import type { DeliveryLogQueries, LogHealthState, Queryable } from '../../libs/delivery-store/index.js';
import type { ResendService } from '../../libs/failed/index.js';
import type { Logger } from '../../libs/logger/index.js';
import type { MerchantDirectory, MerchantSettings } from '../../libs/merchants/index.js';
import type { Authenticator } from './auth.js';
import type { PortalDeps } from './portal/deps.js';
import type { KeyedConcurrency, RateLimiter, ReturningLimiter } from './rate-limit.js';

/** What the API's apps are made of (program.ts opens them). */
export interface ApiDeps {
  auth: Authenticator;
  resend: ResendService;
  limiter: RateLimiter;
  portalLimits: { settings: ReturningLimiter; tests: RateLimiter; recover: ReturningLimiter; address: RateLimiter };
  /** TRUST_PROXY, as Express's `trust proxy`. */
  trustProxy?: number | string[];
  logger: Logger;
  brokerConnected: () => boolean;
  registry: Registry;
  /** False when METRICS_PORT, or ADMIN_PORT, serves it. */
  serveMetrics: boolean;
  serveAdmin: boolean;
  merchants: MerchantDirectory;
  settings: MerchantSettings;
  audit: Queryable;
  /** Absent with DELIVERY_LOG=off. */
  log?: DeliveryLogQueries;
  logHealth?: () => LogHealthState;
  logLimiter: RateLimiter;
  logConcurrency: KeyedConcurrency;
  databaseReachable: () => boolean;
  /** Merchants whose newest row this replica cannot open (a key it lacks). */
  merchantsUnreadable: () => number;
  portal: PortalDeps;
}
