import { replicationOf } from '../../libs/config/index.js';
import type { BrokerConnection } from '../../libs/broker/index.js';
import { createGotClient, createUndiciClient } from '../../libs/http/index.js';
import type { Logger } from '../../libs/logger/index.js';
import { BrokerMerchantDirectory, FileMerchantDirectory, type MerchantDirectory } from '../../libs/merchants/index.js';
import { METRIC_NAMES, counterFrom, createRegistry, deliveryMetrics, gaugeFrom, labelledGaugeFrom } from '../../libs/metrics/index.js';
import { RetryWatch } from '../../libs/retries/index.js';
import { openTopologyBroker, topologyNames } from '../../libs/topology/index.js';
import type { DispatcherConfig } from './config.js';
import { Dispatcher } from './dispatcher.js';
import { startHealthServer } from '../../libs/metrics/health-server.js';

export const USER_AGENT = 'nucleus-webhooks/0.1 (+https://github.com/standard-webhooks/standard-webhooks)';

export interface DispatcherProgram {
  dispatcher: Dispatcher;
  broker: BrokerConnection;
  merchants: MerchantDirectory;
  /** The port of /metrics, /healthz and /readyz. */
  metricsPort: number;
  /** Settles when the broker connection hit what reconnecting cannot fix (a topology mismatch). */
  fatal: Promise<Error>;
  stop(): Promise<void>;
}

/** Wires the dispatcher from parsed config: directory, broker (topology on every connect), HTTP client. */
export async function startDispatcher(config: DispatcherConfig, logger: Logger): Promise<DispatcherProgram> {
  const fromFile = config.MERCHANT_DIRECTORY === 'file';
  let merchants: MerchantDirectory | undefined = fromFile ? new FileMerchantDirectory(config.MERCHANTS_FILE!, logger).watch() : undefined;
  let broker: BrokerConnection;
  try {
    broker = await openTopologyBroker({
      url: config.RABBITMQ_URL,
      name: 'webhooks-dispatcher',
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
  const names = topologyNames(config.TOPOLOGY_PREFIX);
  if (!merchants) {
    // Deliveries wait for the whole directory: an event for a merchant not read yet would be parked as unknown.
    const directory = new BrokerMerchantDirectory(broker, names.merchants, logger);
    try {
      await directory.start();
      await directory.waitUntilReady(120_000);
    } catch (err) {
      await directory.close();
      await broker.close();
      throw err;
    }
    merchants = directory;
  }
  const http =
    config.HTTP_CLIENT === 'got'
      ? createGotClient({ allowPrivateTargets: config.ALLOW_PRIVATE_TARGETS })
      : createUndiciClient({ allowPrivateTargets: config.ALLOW_PRIVATE_TARGETS });
  const registry = createRegistry('dispatcher');
  const retryWatch = new RetryWatch(broker, names.retries, logger, {
    dispatch: names.dispatch,
    overdueAfterMs: config.RETRY_OVERDUE_AFTER,
    checkEveryMs: Math.min(5_000, Math.max(200, Math.round(config.RETRY_OVERDUE_AFTER / 4))),
  });
  await retryWatch.start();
  const dispatcher = new Dispatcher(
    { broker, merchants, http, logger, observer: deliveryMetrics(registry), retryWatch },
    {
      prefix: config.TOPOLOGY_PREFIX,
      retryDelaysMs: config.RETRY_SCHEDULE,
      deliveryTimeoutMs: config.DELIVERY_TIMEOUT_MS,
      concurrency: config.DISPATCH_CONCURRENCY,
      maxMessageBytes: config.MAX_MESSAGE_BYTES,
      userAgent: USER_AGENT,
    },
  );
  await dispatcher.start();

  const queues = [names.dispatch, ...config.RETRY_SCHEDULE.map((_, i) => names.retry(i)), names.invalid];
  gaugeFrom(registry, METRIC_NAMES.brokerConnected, '1 while connected to RabbitMQ', () => (broker.isConnected ? 1 : 0));
  labelledGaugeFrom(registry, METRIC_NAMES.circuitOpen, '1 while the endpoint circuit is open', 'endpoint', () =>
    dispatcher.guards.openEndpoints().map((endpoint) => [endpoint, 1]),
  );
  labelledGaugeFrom(registry, METRIC_NAMES.queueMessages, 'Messages ready in the queue', 'queue', async () => {
    if (!broker.isConnected) return [];
    const channel = await broker.createChannel();
    try {
      const depths: Array<[string, number]> = [];
      for (const queue of queues) depths.push([queue, (await channel.checkQueue(queue)).messageCount]);
      return depths;
    } catch {
      return [];
    } finally {
      await channel.close().catch(() => {});
    }
  });
  labelledGaugeFrom(registry, METRIC_NAMES.retryWaiting, 'Messages moved into the retry tier and not back yet, ready or held by the broker', 'queue', () => [
    ...retryWatch.waitingByQueue(),
  ]);
  labelledGaugeFrom(registry, METRIC_NAMES.retryOverdue, 'Messages more than RETRY_OVERDUE_AFTER past due in the retry tier', 'queue', () => [
    ...retryWatch.overdueByQueue(),
  ]);
  counterFrom(registry, METRIC_NAMES.retriesRecovered, 'Copies put back in dispatch for messages their retry tier held too long', () => retryWatch.stats.recovered);
  const health = await startHealthServer({ port: config.METRICS_PORT, registry, ready: () => broker.isConnected });
  logger.info('dispatcher metrics listening', { port: health.port });

  let stopping: Promise<void> | undefined;
  return {
    dispatcher,
    broker,
    merchants,
    fatal: new Promise<Error>((resolve) => broker.once('fatal', resolve)),
    metricsPort: health.port,
    stop() {
      stopping ??= (async () => {
        await dispatcher.stop();
        await retryWatch.stop();
        await health.close();
        await merchants!.close();
        await broker.close();
        http.close();
      })();
      return stopping;
    },
  };
}
