import { BrokerConnection } from '../../libs/broker/index.js';
import { replicationOf } from '../../libs/config/index.js';
import { DeliveryLogRecorder, openPostgres } from '../../libs/delivery-store/index.js';
import type { Logger } from '../../libs/logger/index.js';
import type { RecorderConfig } from './config.js';
import { METRIC_NAMES, createRegistry, gaugeFrom } from '../../libs/metrics/index.js';
import { startHealthServer } from '../../libs/metrics/health-server.js';
import { awaitSchema, type SchemaWaitState } from '../../libs/migrations/index.js';
import { declareQueueSpec, deliveriesSpec } from '../../libs/topology/index.js';

export type RecorderProgram = Awaited<ReturnType<typeof startRecorder>>;

type RecorderProgramConfig = Pick<RecorderConfig, 'RABBITMQ_URL' | 'TOPOLOGY_PREFIX' | 'QUORUM_GROUP_SIZE' | 'STREAM_CLUSTER_SIZE' | 'METRICS_PORT' | 'DATABASE_URL' | 'DELIVERY_LOG_RETENTION'>;

/** The recorder as a program (also inside npm start). Any number may run: one leads, the others stand by. */
export async function startRecorder(config: RecorderProgramConfig, logger: Logger, options: { signal?: AbortSignal } = {}) {
  // Up from the first moment, so /readyz says what start-up waits for: PostgreSQL, the schema, RabbitMQ.
  const registry = createRegistry('recorder');
  let awaited: SchemaWaitState & { broker?: BrokerConnection; started?: boolean } = { waiting: 'database' };
  const waitingFor = () =>
    awaited.waiting === 'schema' ? 'the database schema'
    : awaited.waiting === 'database' ? 'PostgreSQL'
    : !awaited.broker?.isConnected ? 'RabbitMQ'
    : awaited.started ? undefined : 'the deliveries stream';
  const metrics =
    config.METRICS_PORT === undefined
      ? undefined
      : await startHealthServer({ port: config.METRICS_PORT, registry, ready: () => waitingFor() === undefined, waitingFor, detail: () => awaited.detail });
  // With METRICS_PORT=0 nothing else tells the port bound.
  if (metrics) logger.info('recorder metrics listening', { port: metrics.port });
  const database = openPostgres(config.DATABASE_URL!, { applicationName: 'webhooks-recorder' });
  // Declared on every connect: an operator may have deleted it.
  const stream = deliveriesSpec(config.TOPOLOGY_PREFIX, replicationOf(config));
  const broker = new BrokerConnection({ url: config.RABBITMQ_URL, name: 'webhooks-recorder', logger, declare: (openChannel) => declareQueueSpec(openChannel, stream) });
  // From the first moment: a recorder cut off from RabbitMQ keeps its lead while it stores nothing,
  // and WebhooksBrokerDisconnected tells.
  gaugeFrom(registry, METRIC_NAMES.brokerConnected, '1 while connected to RabbitMQ', () => (broker.isConnected ? 1 : 0));
  const recorder = new DeliveryLogRecorder(broker, database, logger, {
    prefix: config.TOPOLOGY_PREFIX,
    replication: replicationOf(config),
    retentionMs: config.DELIVERY_LOG_RETENTION,
  });
  try {
    await awaitSchema(database, logger, { signal: options.signal, onState: (state) => (awaited = state) });
    awaited = { broker };
    await broker.open(undefined, options.signal);
    // Ready once it reads the stream (RabbitMQ lost meanwhile fails the start, as at the connect).
    await recorder.start();
    awaited = { broker, started: true };
  } catch (err) {
    await metrics?.close();
    await broker.close();
    await database.close();
    throw err;
  }
  const state = recorder.state;
  gaugeFrom(registry, METRIC_NAMES.deliveryLogLeading, '1 while this recorder holds the lead', () => (state.leading ? 1 : 0));
  gaugeFrom(registry, METRIC_NAMES.deliveryLogPending, 'Stream messages read and not stored yet', () => state.pending);
  gaugeFrom(registry, METRIC_NAMES.deliveryLogPendingBytes, 'Bytes of the stream messages read and not stored yet', () => state.pendingBytes);
  gaugeFrom(registry, METRIC_NAMES.deliveryLogStored, 'Delivery records stored by this recorder', () => state.recordsStored);
  gaugeFrom(registry, METRIC_NAMES.deliveryLogQuarantined, 'Delivery records PostgreSQL refused, set aside in delivery_log_quarantine', () => state.quarantined);
  gaugeFrom(registry, METRIC_NAMES.deliveryLogRejected, 'Stream entries that were not delivery records, set aside in delivery_log_quarantine', () => state.rejected);
  // Measured from the last checkpoint stored past, so a silent consumer shows as growing.
  gaugeFrom(registry, METRIC_NAMES.deliveryLogBehind, 'Seconds since the stream last ended where the log held every record', () =>
    state.leading && state.caughtUpAt ? Math.round((Date.now() - state.caughtUpAt) / 1000) : 0,
  );
  let stopping: Promise<void> | undefined;
  return {
    recorder,
    metricsPort: metrics?.port,
    fatal: broker.refused,
    stop() {
      stopping ??= (async () => {
        metrics?.stopping();
        await recorder.stop();
        await metrics?.close();
        await broker.close();
        await database.close();
      })();
      return stopping;
    },
  };
}
