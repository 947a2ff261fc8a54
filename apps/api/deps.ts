import type { Registry } from 'prom-client';
import type { DeliveryLogQueries, LogHealthState, Queryable } from '../../libs/delivery-store/index.js';
import type { ResendService } from '../../libs/failed/index.js';
import type { Logger } from '../../libs/logger/index.js';
import type { MerchantDirectory, MerchantSettings } from '../../libs/merchants/index.js';
import type { SchemaWaitState } from '../../libs/migrations/index.js';
import type { Authenticator } from './auth.js';
import type { KeyedConcurrency } from './concurrency.js';
import type { PortalDeps } from './portal/deps.js';
import type { RateLimiter } from './rate-limit.js';

/** What the API's apps are made of: program.ts opens them, tests give their own. */
export interface ApiDeps {
  auth: Authenticator;
  resend: ResendService;
  limiter: RateLimiter;
  /**
   * The portal's writes, per merchant, apart from its API budget: endpoint changes and rotations
   * (`settings`), test events (`tests`). Shared by the replicas, as the resend limit.
   */
  portalLimits?: { settings: RateLimiter; tests: RateLimiter; recover: RateLimiter; address?: RateLimiter };
  /** Express's `trust proxy` (TRUST_PROXY): which proxies may name the client in X-Forwarded-For; none when unset. */
  trustProxy?: number | string[];
  logger: Logger;
  brokerConnected: () => boolean;
  registry?: Registry;
  /** Serve /metrics on this app's port (false when METRICS_PORT gives it a port of its own). */
  serveMetrics?: boolean;
  /** The admin API reads merchants here and writes them through settings (not with MERCHANTS_FILE). */
  merchants?: MerchantDirectory;
  settings?: MerchantSettings;
  /** The merchants' database, where the audit trail is written and read; absent with MERCHANTS_FILE. */
  audit?: Queryable;
  /** Serve /admin on this app's port (false when ADMIN_PORT gives it a port of its own: createAdminApp). */
  serveAdmin?: boolean;
  /** The delivery log's reads; absent with DELIVERY_LOG=off. */
  log?: DeliveryLogQueries;
  /** Per merchant: log reads per minute, and log reads in flight at once. */
  logLimiter?: RateLimiter;
  logConcurrency?: KeyedConcurrency;
  logHealth?: () => LogHealthState;
  /** Whether PostgreSQL answered its last check (every few seconds, on a connection of its own). */
  databaseReachable?: () => boolean;
  /** What the schema check still waits for (with MERCHANTS_FILE it runs beside the API); none once it passed. */
  schemaWaiting?: () => SchemaWaitState;
  /** Merchants whose newest row this replica cannot open (sealed with a key it lacks): it is not ready while there are any. */
  merchantsUnreadable?: () => number;
  /** The merchant portal (/portal/ and /portal/api/...), on the public port only. */
  portal?: PortalDeps;
}
