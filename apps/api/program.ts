import { once } from 'node:events';
import { createServer, type IncomingMessage, type RequestListener, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { DEV_MERCHANTS_FILE, topologyOf } from '../../libs/config/index.js';
import { FailedStore, ResendService } from '../../libs/failed/index.js';
import type { Logger } from '../../libs/logger/index.js';
import { DISABLED_REASONS, MerchantSettings, openMerchants } from '../../libs/merchants/index.js';
import { OPERATIONAL_EVENT_TYPES, OperationalPublisher, announcer } from '../../libs/operational/index.js';
import { METRIC_NAMES, createRegistry, gaugeFrom, operationalMetrics } from '../../libs/metrics/index.js';
import { type Database, deliveryLogQueries, LogHealth, openPostgres, type PostgresOptions, type Queryable } from '../../libs/delivery-store/index.js';
import { awaitSchema, awaitSchemaAt, type SchemaWaitState } from '../../libs/migrations/index.js';
import { openTopologyBroker, topologyNames } from '../../libs/topology/index.js';
import { createAdminApp, createApp } from './app.js';
import { Authenticator } from './auth.js';
import type { ApiConfig } from './config.js';
import type { ApiDeps } from './deps.js';
import { ApiError, errorBody, unavailable } from './errors.js';
import { KeyedConcurrency, MemoryRateLimiter, RememberedRefusals, SharedRateLimiter } from './rate-limit.js';
import { startHealthServer } from '../../libs/metrics/health-server.js';
import { Cleanup, stopBudget, within } from '../../libs/runtime/index.js';
import { endpointHealth, PortalSessions, TokenSigner } from '../../libs/portal/index.js';
import { EventPublisher } from '../../libs/publisher/index.js';
import { type OpenedLog, openDeliveryLog, openDevDatabase } from '../recorder/open-log.js';

/** A read's statement is cancelled after 2 s, well under the 5 s a read may wait for a connection. */
export const LOG_READS_POOL: PostgresOptions = { maxConnections: 10, connectTimeoutMs: 5_000, statementTimeoutMs: 2_000, applicationName: 'webhooks-api log reads' };
const LOG_HEALTH_POOL: PostgresOptions = { maxConnections: 1, connectTimeoutMs: 2_000, statementTimeoutMs: 2_000, applicationName: 'webhooks-api log health' };
/** Each merchant's log reads in flight (2 of the pool's 10), waiting, and how long they wait. */
export const LOG_READS_PER_MERCHANT = 2;
export const LOG_READS_QUEUED_PER_MERCHANT = 8;
export const LOG_READ_QUEUE_WAIT_MS = 2_000;
export const SERVER_TIMEOUTS = { headersMs: 10_000, requestMs: 30_000 };
/** Shared by the replicas: the portal's writes per merchant, Recover rounds a day, link exchanges per address. */
export const PORTAL_SETTINGS_LIMIT = { perMinute: 10, burst: 10 };
export const PORTAL_TEST_LIMIT = { perMinute: 10, burst: 10 };
export const RECOVER_ROUNDS_PER_DAY = 10;
export const PORTAL_ADDRESS_LIMIT = { perMinute: 30, burst: 30 };

export interface ApiOptions {
  /** Instead of RESEND_RATE_LIMIT, LOG_RATE_LIMIT and PORTAL_ADDRESS_LIMIT. */
  rateLimit?: { perMinute: number; burst: number };
  logRateLimit?: { perMinute: number; burst: number };
  portalAddressLimit?: { perMinute: number; burst: number };
  signal?: AbortSignal;
  /** npm start shares one PGlite between the programs. */
  database?: Database;
  resendConfirmDeadlineMs?: number;
  /** Tests make one merchant's queries slow with it. */
  wrapLogQueries?: (db: Queryable) => Queryable;
}

export type ApiProgram = Awaited<ReturnType<typeof startParts>>;

export async function startApi(config: ApiConfig, logger: Logger, options: ApiOptions = {}): Promise<ApiProgram> {
  // PORT listens from the first moment (startingHandler), so a liveness probe sees a live process.
  const progress = new StartupProgress();
  const starting = startingHandler(progress);
  const server = await listen(starting, config.PORT);
  // What start-up opens, closed if a later step fails.
  const cleanup = new Cleanup();
  cleanup.add(() => drain(server, 0));
  return cleanup.guard(() => startParts(config, logger, options, { server, starting }, progress, cleanup));
}

async function startParts(config: ApiConfig, logger: Logger, options: ApiOptions, { server, starting }: { server: Server; starting: RequestListener }, progress: StartupProgress, cleanup: Cleanup) {
  const registry = createRegistry('api');
  let serving = false;
  const metrics = config.METRICS_PORT === undefined ? undefined : await startHealthServer({
    port: config.METRICS_PORT,
    registry,
    ready: () => serving && broker.isConnected,
    waitingFor: () => (serving ? 'RabbitMQ' : progress.what),
    detail: () => (serving ? undefined : progress.detail),
  });
  cleanup.add(() => metrics?.close());
  // Development mode without DATABASE_URL: an embedded database, which this process then owns (and migrates).
  const ownDatabase = !options.database && !config.DATABASE_URL ? await openDevDatabase(logger) : undefined;
  cleanup.add(() => ownDatabase?.close());
  const given = options.database ?? ownDatabase;
  const onState = (state: SchemaWaitState) => progress.schema(state);
  if (given) await awaitSchema(given, logger, { signal: options.signal, onState });
  else await awaitSchemaAt(config.DATABASE_URL!, 'webhooks-api schema check', logger, { signal: options.signal, onState });
  progress.waitFor('the merchant database');
  const opened = await openMerchants(config, logger, { database: given, applicationName: 'webhooks-api merchants', signal: options.signal, seedFile: config.WEBHOOKS_DEV ? DEV_MERCHANTS_FILE : undefined, openSecrets: false });
  cleanup.add(() => opened.close());
  const directory = opened.merchants;
  progress.waitFor('RabbitMQ');
  progress.database = true;
  const broker = await openTopologyBroker({ url: config.RABBITMQ_URL, name: 'webhooks-api', logger, topology: topologyOf(config), signal: options.signal });
  cleanup.add(() => broker.close());
  progress.broker = true;
  if (config.DELIVERY_LOG === 'on') progress.waitFor('the delivery log');
  // The failure index and the claims of resends: the merchants' pool.
  const failures = new FailedStore(opened.database);
  let log: OpenedLog | undefined;
  let healthDatabase: Database | undefined;
  if (config.DELIVERY_LOG === 'on') {
    if (config.DATABASE_URL && !given) {
      const database = openPostgres(config.DATABASE_URL, LOG_READS_POOL);
      log = { database, close: () => database.close() };
      // A connection of its own: merchants' reads filling the pool must not make the log look down.
      healthDatabase = openPostgres(config.DATABASE_URL, LOG_HEALTH_POOL);
    } else {
      // The caller's database, or development mode's embedded one (with its recorder): one process, no pool.
      log = await openDeliveryLog(config, broker, logger, given!);
    }
    cleanup.add(() => Promise.all([log?.close(), healthDatabase?.close()]));
  }
  // /readyz's check of PostgreSQL, and how far behind the log is: on the log's database, else the failures'.
  const databaseHealth = new LogHealth(healthDatabase ?? log?.database ?? opened.database, topologyNames(config.TOPOLOGY_PREFIX).deliveries);
  await databaseHealth.start();
  cleanup.add(() => databaseHealth.stop());
  const health = log && databaseHealth;

  gaugeFrom(registry, METRIC_NAMES.brokerConnected, '1 while connected to RabbitMQ', () => (broker.isConnected ? 1 : 0));
  gaugeFrom(registry, METRIC_NAMES.merchantsUnreadable, 'Merchants whose newest row this program cannot open (a key it lacks): served at their last readable version', () => directory.unreadable.length);
  if (health) {
    gaugeFrom(registry, METRIC_NAMES.deliveryLogBehind, 'Seconds since the delivery log last held every record read', () => health.state.behindSeconds ?? 0);
  }
  const operationalCounts = operationalMetrics(registry, OPERATIONAL_EVENT_TYPES, DISABLED_REASONS);
  // An endpoint write answers once its event is published or given up on: within 10 s, as any publish while RabbitMQ is away.
  const operational = new OperationalPublisher(broker, topologyNames(config.TOPOLOGY_PREFIX).operational, logger, { onPublished: (type) => operationalCounts.published(type), deadlineMs: 10_000 });
  const logDatabase = log && (options.wrapLogQueries?.(log.database) ?? log.database);
  const publisher = new EventPublisher(broker, config.TOPOLOGY_PREFIX);
  const port = (server.address() as AddressInfo).port;
  // Resends and the portal's writes count in PostgreSQL, so that replicas together allow what one allows.
  const logRate = options.logRateLimit ?? config.LOG_RATE_LIMIT;
  const shared = (name: string, { perMinute, burst }: { perMinute: number; burst: number }) =>
    new SharedRateLimiter(opened.database, name, perMinute, burst);
  const deps: ApiDeps = {
    auth: new Authenticator(
      opened.merchants,
      config.AUTH_JWT_SECRET ? { secret: config.AUTH_JWT_SECRET } : { jwksUrl: config.AUTH_JWKS_URL! },
      { issuer: config.AUTH_JWT_ISSUER, audience: config.AUTH_JWT_AUDIENCE },
    ),
    resend: new ResendService(broker, failures, config.TOPOLOGY_PREFIX, logger, { confirmDeadlineMs: options.resendConfirmDeadlineMs }),
    // A flood of refused resends is answered from memory: it costs the shared pool no query.
    limiter: new RememberedRefusals(shared('resend', options.rateLimit ?? config.RESEND_RATE_LIMIT)),
    // Log reads bound this replica's own pool, so they count here.
    logLimiter: new MemoryRateLimiter(logRate.perMinute, logRate.burst),
    portalLimits: {
      settings: shared('portal-settings', PORTAL_SETTINGS_LIMIT),
      tests: shared('portal-tests', PORTAL_TEST_LIMIT),
      recover: shared('portal-recover', { perMinute: RECOVER_ROUNDS_PER_DAY / 1440, burst: RECOVER_ROUNDS_PER_DAY }),
      address: new RememberedRefusals(shared('portal-address', options.portalAddressLimit ?? PORTAL_ADDRESS_LIMIT)),
    },
    trustProxy: config.TRUST_PROXY,
    logConcurrency: new KeyedConcurrency(LOG_READS_PER_MERCHANT, LOG_READS_QUEUED_PER_MERCHANT, LOG_READ_QUEUE_WAIT_MS),
    logger,
    brokerConnected: () => broker.isConnected,
    registry,
    merchants: directory,
    audit: opened.database,
    settings: new MerchantSettings(directory, { allowHttp: config.WEBHOOKS_DEV, allowPrivateTargets: config.ALLOW_PRIVATE_TARGETS }, undefined, announcer(operational, logger, (reason) => operationalCounts.disabled(reason)), config.MAX_ENDPOINTS_PER_MERCHANT),
    serveMetrics: config.METRICS_PORT === undefined,
    serveAdmin: config.ADMIN_PORT === undefined,
    log: logDatabase && deliveryLogQueries(logDatabase),
    logHealth: health && (() => health.state),
    databaseReachable: () => databaseHealth.state.database === 'up',
    merchantsUnreadable: () => directory.unreadable.length,
    portal: {
      sessions: logDatabase && new PortalSessions(logDatabase, new TokenSigner(config.SECRETS_KEY, config.SECRETS_KEY_PREVIOUS)),
      health: (merchantId) => endpointHealth(logDatabase!, merchantId),
      publish: (message, options) => publisher.publish(message, options),
      // Development mode only: this API's own port, never the request's Host, which the caller sets.
      baseUrl: config.PORTAL_PUBLIC_URL ?? `http://127.0.0.1:${port}`,
      // Secure outside development mode, also on http://localhost (a secure context); `__Host-` needs https.
      secureCookies: !config.WEBHOOKS_DEV || (config.PORTAL_PUBLIC_URL?.startsWith('https:') ?? false),
      hostPrefixCookie: config.PORTAL_PUBLIC_URL?.startsWith('https:') ?? false,
      frameAncestors: config.PORTAL_FRAME_ANCESTORS,
    },
  };
  const adminServer = config.ADMIN_PORT === undefined ? undefined : await listen(createAdminApp(deps), config.ADMIN_PORT);
  server.off('request', starting);
  server.on('request', createApp(deps));
  const adminPort = adminServer && (adminServer.address() as AddressInfo).port;
  logger.info('api listening', { port, metricsPort: metrics?.port, adminPort });

  serving = true;
  let stopping: Promise<void> | undefined;
  return {
    port,
    metricsPort: metrics?.port,
    adminPort,
    broker,
    failures,
    fatal: broker.refused,
    stop() {
      // Bounded by SHUTDOWN_TIMEOUT whatever the broker does: requests in flight get what the close steps leave.
      stopping ??= (async () => {
        metrics?.stopping();
        const budget = stopBudget(config.SHUTDOWN_TIMEOUT, logger);
        // Finish requests in flight (their publishes need the broker), then disconnect.
        const forRequests = Math.max(0, config.SHUTDOWN_TIMEOUT - Math.min(5_000, config.SHUTDOWN_TIMEOUT / 2));
        await budget.step('requests in flight', () => Promise.all([drain(server, forRequests), adminServer && drain(adminServer, forRequests)]), forRequests);
        await budget.step('metrics server', async () => metrics?.close(), budget.left() / 3);
        await budget.step('late confirms of resends', () => deps.resend.drain(), budget.left() / 3);
        databaseHealth.stop();
        await budget.step('delivery log', async () => Promise.all([log?.close(), healthDatabase?.close()]), budget.left() / 3);
        await budget.step('merchant directory', () => opened.close(), budget.left() / 2);
        await ownDatabase?.close();
        await budget.step('broker connection', () => broker.close(budget.left()));
      })();
      return stopping;
    },
  };
}

/** Each server's answers under way: a stop ends their keep-alive connections with them. */
const answering = new WeakMap<Server, Set<ServerResponse>>();

async function listen(handler: RequestListener, port: number | undefined): Promise<Server> {
  const server = createServer(handler);
  const open = new Set<ServerResponse>();
  answering.set(server, open);
  // Ahead of the handler, which may answer at once. A request once the server is closing came on a
  // kept-alive connection: answered, and that connection closed with it.
  server.prependListener('request', (_req, res) => {
    if (!server.listening) res.shouldKeepAlive = false;
    open.add(res);
    res.once('close', () => open.delete(res));
  });
  server.listen(port);
  server.headersTimeout = SERVER_TIMEOUTS.headersMs;
  server.requestTimeout = SERVER_TIMEOUTS.requestMs;
  // Malformed requests and oversized headers never reach Express: answer them in the envelope too.
  server.on('clientError', (err: NodeJS.ErrnoException, socket) => {
    if (!socket.writable) return socket.destroy();
    const error =
      err.code === 'HPE_HEADER_OVERFLOW'
        ? new ApiError(431, 'header_too_large', 'Request headers are too large')
        : new ApiError(400, 'bad_request', 'The request could not be read');
    const body = JSON.stringify(errorBody(error));
    socket.end(
      `HTTP/1.1 ${error.status} ${error.status === 431 ? 'Request Header Fields Too Large' : 'Bad Request'}\r\n` +
        `content-type: application/json; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
    );
  });
  await once(server, 'listening');
  return server;
}

/** Lets requests in flight finish, up to `waitMs`, each answered with `Connection: close`, then closes what is left. */
async function drain(server: Server, waitMs: number): Promise<void> {
  const closed = new Promise<void>((resolve) => server.close(() => resolve()));
  server.closeIdleConnections();
  // One whose head already went keeps its connection for one more request, answered with Connection: close.
  for (const res of answering.get(server) ?? []) res.shouldKeepAlive = false;
  await within(waitMs, closed);
  server.closeAllConnections();
}

/** What the API's start-up waits for now, for /readyz. */
class StartupProgress {
  what = 'PostgreSQL';
  detail?: string;
  database = false;
  broker = false;

  waitFor(what: string, detail?: string): void {
    this.what = what;
    this.detail = detail;
  }

  schema(state: SchemaWaitState): void {
    this.database = state.waiting !== 'database';
    if (state.waiting) this.waitFor(state.waiting === 'schema' ? 'the database schema' : 'PostgreSQL', state.detail);
    else this.waitFor('the merchant database');
  }
}

/** PORT's answers while the API starts: /healthz 200, so that a liveness probe does not kill a program that only waits. */
function startingHandler(progress: StartupProgress): (req: IncomingMessage, res: ServerResponse) => void {
  return (req, res) => {
    const path = (req.url ?? '').split('?')[0];
    const json = (status: number, body: unknown, headers: Record<string, string> = {}) =>
      void res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', ...headers }).end(JSON.stringify(body));
    if (req.method === 'GET' && path === '/healthz') return json(200, { status: 'ok' });
    if (req.method === 'GET' && path === '/readyz') return json(503, {
        status: 'not ready',
        broker: progress.broker ? 'connected' : 'disconnected',
        database: progress.database ? 'reachable' : 'unreachable',
        waitingFor: progress.what,
        detail: progress.detail,
      });
    const error = unavailable('The service is starting; try again shortly');
    json(error.status, errorBody(error), error.headers);
  };
}
