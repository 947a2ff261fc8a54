import { once } from 'node:events';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { replicationOf } from '../../libs/config/index.js';
import type { BrokerConnection } from '../../libs/broker/index.js';
import { FailedIndex, ResendService } from '../../libs/failed/index.js';
import type { Logger } from '../../libs/logger/index.js';
import { BrokerMerchantDirectory, FileMerchantDirectory, type MerchantDirectory, MerchantSettings } from '../../libs/merchants/index.js';
import { METRIC_NAMES, createRegistry, gaugeFrom } from '../../libs/metrics/index.js';
import { openTopologyBroker, topologyNames } from '../../libs/topology/index.js';
import { createApp } from './app.js';
import { Authenticator } from './auth.js';
import type { ApiConfig } from './config.js';
import { ApiError, errorBody } from './errors.js';
import { RateLimiter } from './rate-limit.js';
import { startHealthServer } from '../../libs/metrics/health-server.js';

export interface ApiProgram {
  server: Server;
  port: number;
  /** Where /metrics is served when METRICS_PORT is set. */
  metricsPort?: number;
  index: FailedIndex;
  broker: BrokerConnection;
  /** Settles when the broker connection hit what reconnecting cannot fix (a topology mismatch). */
  fatal: Promise<Error>;
  stop(): Promise<void>;
}

export interface ApiOptions {
  /** Resends per merchant per minute, and the burst allowed at once; RESEND_RATE_LIMIT by default. */
  rateLimit?: { perMinute: number; burst: number };
}

export async function startApi(config: ApiConfig, logger: Logger, options: ApiOptions = {}): Promise<ApiProgram> {
  const fromFile = config.MERCHANT_DIRECTORY === 'file';
  let merchants: MerchantDirectory | undefined = fromFile ? new FileMerchantDirectory(config.MERCHANTS_FILE!, logger).watch() : undefined;
  let broker: BrokerConnection;
  try {
    broker = await openTopologyBroker({
      url: config.RABBITMQ_URL,
      name: 'webhooks-api',
      logger,
      topology: {
        prefix: config.TOPOLOGY_PREFIX,
        retryDelaysMs: config.RETRY_SCHEDULE,
        failedRetention: config.FAILED_RETENTION,
        replication: replicationOf(config),
        merchantsStream: !fromFile,
      },
    });
  } catch (err) {
    await merchants?.close();
    throw err;
  }
  // The API answers /readyz 503 until the directory has caught up, like the failed index.
  let directory: BrokerMerchantDirectory | undefined;
  if (!merchants) {
    directory = new BrokerMerchantDirectory(broker, topologyNames(config.TOPOLOGY_PREFIX).merchants, logger);
    await directory.start();
    merchants = directory;
  }
  const merchantsReady = () => directory?.ready ?? true;
  const index = new FailedIndex(broker, topologyNames(config.TOPOLOGY_PREFIX).failed, logger);
  await index.start();

  const auth = new Authenticator(
    merchants,
    config.AUTH_JWT_SECRET ? { secret: config.AUTH_JWT_SECRET } : { jwksUrl: config.AUTH_JWKS_URL! },
    { issuer: config.AUTH_JWT_ISSUER, audience: config.AUTH_JWT_AUDIENCE },
  );
  const rate = options.rateLimit ?? config.RESEND_RATE_LIMIT;
  const registry = createRegistry('api');
  gaugeFrom(registry, METRIC_NAMES.failedIndexEntries, 'Unresolved failure entries in the failed index', () => index.size);
  gaugeFrom(registry, METRIC_NAMES.brokerConnected, '1 while connected to RabbitMQ', () => (broker.isConnected ? 1 : 0));
  const app = createApp({
    auth,
    index,
    resend: new ResendService(broker, index, config.TOPOLOGY_PREFIX, logger, { replica: `webhooks-api pid ${process.pid}` }),
    limiter: new RateLimiter(rate.perMinute, rate.burst),
    logger,
    brokerConnected: () => broker.isConnected,
    registry,
    merchants,
    settings: directory && new MerchantSettings(directory, { allowHttp: config.WEBHOOKS_DEV, allowPrivateTargets: config.ALLOW_PRIVATE_TARGETS }),
    merchantsReady,
    // With METRICS_PORT set, the public port serves only the resend API and health.
    serveMetrics: config.METRICS_PORT === undefined,
  });
  const metrics =
    config.METRICS_PORT === undefined
      ? undefined
      : await startHealthServer({ port: config.METRICS_PORT, registry, ready: () => broker.isConnected && index.ready && merchantsReady() });

  const server = app.listen(config.PORT);
  server.headersTimeout = 10_000;
  server.requestTimeout = 30_000;
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
  const { port } = server.address() as AddressInfo;
  logger.info('api listening', { port, metricsPort: metrics?.port });

  let stopping: Promise<void> | undefined;
  return {
    server,
    port,
    metricsPort: metrics?.port,
    index,
    broker,
    fatal: new Promise<Error>((resolve) => broker.once('fatal', resolve)),
    stop() {
      stopping ??= (async () => {
        // Finish requests in flight (their publishes need the broker), then disconnect.
        const closed = new Promise<void>((resolve) => server.close(() => resolve()));
        server.closeIdleConnections();
        await Promise.race([closed, new Promise((resolve) => setTimeout(resolve, 10_000).unref())]);
        server.closeAllConnections();
        await metrics?.close();
        await index.stop();
        await merchants!.close();
        await broker.close();
      })();
      return stopping;
    },
  };
}
