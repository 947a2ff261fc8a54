import { DEV_MERCHANTS_FILE, replicationOf, topologyOf } from '../../libs/config/index.js';
import { DeliveryRecorder } from '../../libs/delivery-log/index.js';
import type { BrokerConnection } from '../../libs/broker/index.js';
import { createUndiciClient } from '../../libs/http/index.js';
import type { Logger } from '../../libs/logger/index.js';
import { directoryNow, DISABLED_REASONS, type MerchantDirectory, openMerchants } from '../../libs/merchants/index.js';
import { type Database, openPostgres } from '../../libs/delivery-store/index.js';
import { FailedStore } from '../../libs/failed/index.js';
import { IntakeChecker, type IntakeCheckerOptions, IntakeKeyStore } from '../../libs/intake-keys/index.js';
import { openDevDatabase } from '../recorder/open-log.js';
import { awaitSchema, awaitSchemaAt, type SchemaGateOptions } from '../../libs/migrations/index.js';
import { METRIC_NAMES, counterFrom, createRegistry, deliveryMetrics, gaugeFrom, askedPerScrape, labelledGaugeFrom, operationalMetrics, waitMetrics } from '../../libs/metrics/index.js';
import { Throttle } from './stages/throttle.js';
import { OPERATIONAL_EVENT_TYPES, OperationalPublisher } from '../../libs/operational/index.js';
import { Operations } from './operations.js';
import { WaitScheduler, WaitStore, WaitWriter } from '../../libs/waits/index.js';
import { OrderGate, orderingLines, OrderStore, OrderUpkeep } from '../../libs/ordering/index.js';
import { platformEndpoint } from './platform.js';
import { FAILED_SEGMENT_BYTES, openTopologyBroker, topologyNames } from '../../libs/topology/index.js';
import { FAILED_ROLLOVER_EVERY_MS, StreamRollover } from '../../libs/streams/index.js';
import type { DispatcherConfig } from './config.js';
import { Dispatcher } from './dispatcher.js';
import { CircuitRows } from './circuit-rows.js';
import { startHealthServer } from '../../libs/metrics/health-server.js';
import { Cleanup, stopBudget } from '../../libs/runtime/index.js';

/** The product's slug and package.json's version (test/unit/docs-product-name.test.ts checks both). */
export const USER_AGENT = 'nucleus-webhooks/0.1.0 (+https://github.com/standard-webhooks/standard-webhooks)';

export type DispatcherProgram = Awaited<ReturnType<typeof startParts>>;

/** What closing takes once deliveries are drained, out of SHUTDOWN_TIMEOUT. */
const CLOSE_RESERVE_MS = 5_000;

export interface DispatcherOptions {
  /** Ends the start-up at once. */
  signal?: AbortSignal;
  /** The database when the caller opened it (npm start shares one embedded PGlite); else DATABASE_URL. */
  database?: Database;
  merchantsPollMs?: number;
  intakeCheck?: IntakeCheckerOptions;
  /** This host's clock (the system's by default). */
  now?: () => Date;
}

export function startDispatcher(config: DispatcherConfig, logger: Logger, options: DispatcherOptions = {}): Promise<DispatcherProgram> {
  const cleanup = new Cleanup();
  return cleanup.guard(() => startParts(config, logger, options, cleanup));
}

async function startParts(config: DispatcherConfig, logger: Logger, options: DispatcherOptions, cleanup: Cleanup) {
  // Up from the first moment: /healthz 200 and /readyz 503 (with what is awaited) through a long start-up.
  const registry = createRegistry('dispatcher');
  // Deliveries wait for the whole directory: an event for a merchant not loaded yet would be parked as unknown.
  let awaited: () => string | undefined = () => 'the merchant database';
  let detail: string | undefined;
  const health = await startHealthServer({ port: config.METRICS_PORT, registry, ready: () => awaited() === undefined, waitingFor: () => awaited(), detail: () => (awaited() ? detail : undefined) });
  logger.info('dispatcher metrics listening', { port: health.port });
  cleanup.add(() => health.close());
  const awaiting = (check: () => string | undefined, why?: string) => {
    awaited = check;
    detail = why;
  };
  // Development mode without DATABASE_URL, run alone: an embedded database of its own.
  const ownDatabase = !options.database && !config.DATABASE_URL ? await openDevDatabase(logger) : undefined;
  cleanup.add(() => ownDatabase?.close());
  // The database and RabbitMQ are waited for at once: the first to give up ends the other's wait and is the cause reported.
  const failed = new AbortController();
  let firstCause: { error: unknown } | undefined;
  const giveUp = (err: unknown): never => {
    firstCause ??= { error: err };
    failed.abort();
    throw err;
  };
  const signal = options.signal ? AbortSignal.any([options.signal, failed.signal]) : failed.signal;
  // The schema is waited for, never made here (`webhooks migrate`).
  const schemaOptions: SchemaGateOptions = {
    signal,
    onState: (state) =>
      state.waiting
        ? awaiting(() => (state.waiting === 'schema' ? 'the database schema' : 'PostgreSQL'), state.detail)
        : awaiting(() => 'the merchant database'),
  };
  const given = options.database ?? ownDatabase;
  const schemaReady = () => (given ? awaitSchema(given, logger, schemaOptions) : awaitSchemaAt(config.DATABASE_URL!, 'webhooks-dispatcher schema check', logger, schemaOptions));
  const [loaded, connected] = await Promise.allSettled([
    schemaReady().then(() => openMerchants(config, logger, {
      database: given, applicationName: 'webhooks-dispatcher merchants', signal, pollIntervalMs: options.merchantsPollMs,
      seedFile: config.WEBHOOKS_DEV ? DEV_MERCHANTS_FILE : undefined,
    })).then(
      (opened) => {
        awaiting(() => 'RabbitMQ');
        return opened;
      },
      giveUp,
    ),
    openTopologyBroker({
      url: config.RABBITMQ_URL, name: 'webhooks-dispatcher', logger, signal,
      topology: { ...topologyOf(config), operationalWebhook: config.OPERATIONAL_WEBHOOK_URL !== undefined },
    }).catch(giveUp),
  ]);
  if (loaded.status === 'fulfilled') cleanup.add(() => loaded.value.close());
  if (connected.status === 'fulfilled') cleanup.add(() => connected.value.close());
  if (loaded.status === 'rejected') throw firstCause?.error ?? loaded.reason;
  if (connected.status === 'rejected') throw firstCause?.error ?? connected.reason;
  const opened = loaded.value;
  const merchants: MerchantDirectory = opened.merchants;
  const broker: BrokerConnection = connected.value;
  const names = topologyNames(config.TOPOLOGY_PREFIX);
  const responseBodyBytes = config.DELIVERY_LOG === 'on' ? config.DELIVERY_LOG_RESPONSE_BYTES : 0;
  const http = createUndiciClient({ allowPrivateTargets: config.ALLOW_PRIVATE_TARGETS, responseBodyBytes, connectTimeoutMs: config.DELIVERY_TIMEOUT_MS });
  // Waits on a pool of their own, so that they do not wait behind the directory (every pool commits
  // durably whatever the server's default: a written wait is acked at once).
  const waitsDatabase = !options.database && config.DATABASE_URL
    ? openPostgres(config.DATABASE_URL, { connectTimeoutMs: 2_000, statementTimeoutMs: 10_000, maxConnections: 6, applicationName: 'webhooks-dispatcher waits' })
    : undefined;
  cleanup.add(() => waitsDatabase?.close());
  const waitsQueries = waitsDatabase ?? opened.database;
  const waitStore = new WaitStore(waitsQueries);
  const waitWriter = new WaitWriter(waitStore, logger);
  // Order per reference gates on wait rows: with the waits, on the same pool.
  const orderStore = new OrderStore(waitsQueries);
  const orderGate = new OrderGate(orderStore, logger);
  const leaseMs = Math.max(config.WAIT_LEASE, 2 * config.DELIVERY_TIMEOUT_MS);
  const scheduler = new WaitScheduler(waitStore, broker, logger, { dispatch: names.dispatch, leaseMs });
  // Places of endpoints that no longer order, whose end never came: released after the lease.
  const orderUpkeep = new OrderUpkeep(orderStore, () => orderingLines(merchants.list()), logger, { olderThanMs: leaseMs });
  // Intake keys on a pool of their own with short timeouts: a slow PostgreSQL lets intake go on unchecked.
  const keysDatabase = !options.database && config.DATABASE_URL
    ? openPostgres(config.DATABASE_URL, { connectTimeoutMs: 2_000, statementTimeoutMs: 5_000, maxConnections: 2, applicationName: 'webhooks-dispatcher intake keys' })
    : undefined;
  const keysQueries = keysDatabase ?? opened.database;
  cleanup.add(() => keysDatabase?.close());
  // With the check off too: its upkeep drops the keys taken while it was on.
  const keyUpkeep = new IntakeChecker(new IntakeKeyStore(keysQueries, config.INTAKE_DEDUPE_WINDOW), logger, options.intakeCheck);
  cleanup.add(() => keyUpkeep.stop());
  const intakeKeys = config.INTAKE_DEDUPE_WINDOW > 0 ? keyUpkeep : undefined;
  const deliveryLog = config.DELIVERY_LOG === 'on' ? new DeliveryRecorder(broker, logger, { prefix: config.TOPOLOGY_PREFIX, replication: replicationOf(config) }) : undefined;
  await deliveryLog?.start();
  const operationalCounts = operationalMetrics(registry, OPERATIONAL_EVENT_TYPES, DISABLED_REASONS);
  const operational = new OperationalPublisher(broker, names.operational, logger, {
    onPublished: (type) => operationalCounts.published(type),
    boundToDispatch: config.OPERATIONAL_WEBHOOK_URL !== undefined,
  });
  const operations = new Operations(
    { merchants, writer: opened.merchants, publisher: operational, logger, metrics: operationalCounts },
    { disableAfterMs: config.ENDPOINT_DISABLE_AFTER, intervalMs: config.OPERATIONAL_EVENT_INTERVAL },
  );
  const throttle = new Throttle(waitsQueries, logger);
  labelledGaugeFrom(registry, METRIC_NAMES.endpointRate, 'Webhooks per second a throttled endpoint is sent at: its maxPerSecond, or lower while its 429/503 answers slow it', 'merchant', () => [...throttle.rates()]);
  const dispatcher = new Dispatcher(
    {
      throttle, broker, merchants, http, logger, deliveryLog, operations, intakeKeys, now: options.now, order: orderGate,
      observer: deliveryMetrics(registry, config.OPERATIONAL_WEBHOOK_URL ? OPERATIONAL_EVENT_TYPES : []),
      waits: { store: waitStore, writer: waitWriter },
      failures: new FailedStore(opened.database),
      platform: platformEndpoint(config.OPERATIONAL_WEBHOOK_URL, config.OPERATIONAL_WEBHOOK_SECRET),
    },
    {
      prefix: config.TOPOLOGY_PREFIX, retryDelaysMs: config.RETRY_SCHEDULE, deliveryTimeoutMs: config.DELIVERY_TIMEOUT_MS,
      concurrency: config.DISPATCH_CONCURRENCY, maxMessageBytes: config.MAX_MESSAGE_BYTES,
      userAgent: USER_AGENT, waitLeaseMs: config.WAIT_LEASE,
      drainTimeoutMs: Math.max(0, config.SHUTDOWN_TIMEOUT - Math.min(CLOSE_RESERVE_MS, config.SHUTDOWN_TIMEOUT / 2)),
    },
  );
  const circuitRows = new CircuitRows(waitsQueries, waitStore, (m, e) => dispatcher.admission.keyOfCircuit(m, e), dispatcher.guards, logger);
  await keyUpkeep.start();
  circuitRows.start();
  await dispatcher.start();
  scheduler.start();
  orderUpkeep.start();
  // RabbitMQ applies FAILED_RETENTION only on a new segment.
  const rollover = new StreamRollover(broker, names.failed, { bytes: FAILED_SEGMENT_BYTES, everyMs: FAILED_ROLLOVER_EVERY_MS, logger });
  rollover.start();

  const queues = [names.dispatch, names.invalid];
  gaugeFrom(registry, METRIC_NAMES.brokerConnected, '1 while connected to RabbitMQ', () => (broker.isConnected ? 1 : 0));
  labelledGaugeFrom(registry, METRIC_NAMES.circuitOpen, '1 while the endpoint circuit is open', 'endpoint', () =>
    dispatcher.guards.openEndpoints().map((endpoint) => [endpoint, 1]),
  );
  // None while disconnected, or while RabbitMQ does not answer (silent until the heartbeat gives up).
  const depths = askedPerScrape(async () => {
    const channel = await broker.createChannel();
    try {
      const counted: Array<[string, number]> = [];
      for (const queue of queues) counted.push([queue, (await channel.checkQueue(queue)).messageCount]);
      return counted;
    } finally {
      await channel.close().catch(() => {});
    }
  }, []);
  labelledGaugeFrom(registry, METRIC_NAMES.queueMessages, 'Messages ready in the queue', 'queue', () => (broker.isConnected ? depths() : []));
  // Ready alone is 0 while a stuck dispatcher holds every message.
  gaugeFrom(registry, METRIC_NAMES.dispatchUnacked, 'Messages of dispatch this dispatcher has received and not settled yet (held unacked)', () => dispatcher.unacked);
  gaugeFrom(registry, METRIC_NAMES.circuitsOpen, 'Endpoints whose circuit is open now', () => dispatcher.guards.openEndpoints().length);
  labelledGaugeFrom(registry, METRIC_NAMES.endpointsDisabled, 'Webhooks off now in the merchant directory, by why', 'reason', () => Object.entries(Operations.census(merchants.list(), directoryNow(merchants).getTime(), config.ENDPOINT_DISABLE_AFTER).disabled));
  gaugeFrom(registry, METRIC_NAMES.endpointsFailing, 'Enabled webhooks whose failing clock runs (auto-disable)', () => Operations.census(merchants.list(), directoryNow(merchants).getTime(), config.ENDPOINT_DISABLE_AFTER).failing);
  counterFrom(registry, METRIC_NAMES.duplicates, 'Upstream messages acked without delivery: their key was seen within INTAKE_DEDUPE_WINDOW', () => dispatcher.stats.duplicates);
  counterFrom(registry, METRIC_NAMES.deliveryRecordsLost, 'Deliveries settled without their delivery-log record', () => dispatcher.recordsLost);
  waitMetrics(registry, () => waitStore.census(WAIT_OVERDUE_AFTER_MS));
  const unreadable = () => opened.merchants.unreadable.length;
  gaugeFrom(registry, METRIC_NAMES.merchantsUnreadable, 'Merchants whose newest row this program cannot open (a key it lacks): served at their last readable version', unreadable);
  awaiting(() => (!broker.isConnected ? 'RabbitMQ' : broker.blocked ? `RabbitMQ, which blocks this connection (${broker.blocked})` : unreadable() > 0 ? `SECRETS_KEY_PREVIOUS: ${unreadable()} merchant row(s) sealed with a key this program lacks` : undefined));

  let stopping: Promise<void> | undefined;
  return {
    dispatcher,
    broker,
    merchants,
    /** Settles when the broker connection hit what reconnecting cannot fix. */
    fatal: broker.refused,
    metricsPort: health.port,
    stop(): Promise<void> {
      // Bounded by SHUTDOWN_TIMEOUT: each step gets a share of what is left.
      stopping ??= (async () => {
        health.stopping();
        const budget = stopBudget(config.SHUTDOWN_TIMEOUT, logger);
        await budget.step('drain deliveries', () => dispatcher.stop());
        await budget.step('failed stream rollover', () => rollover.stop(), budget.left() / 4);
        await budget.step('operational events', async () => {
          await operations.stop();
          await operational.stop();
        }, budget.left() / 4);
        await budget.step('delivery records', async () => deliveryLog?.stop(), budget.left() / 3);
        await budget.step('wait scheduler and intake keys', async () => {
          await scheduler.stop();
          await circuitRows.stop();
          await orderUpkeep.stop();
          waitWriter.close();
          orderGate.close();
          await waitsDatabase?.close();
          keyUpkeep.stop();
          await keysDatabase?.close();
        }, budget.left() / 3);
        await budget.step('health server', () => health.close(), budget.left() / 3);
        await budget.step('merchant directory', async () => {
          await opened.close();
          await ownDatabase?.close();
        }, budget.left() / 2);
        await budget.step('broker connection', () => broker.close(budget.left()));
        http.close();
      })();
      return stopping;
    },
  };
}

/** A healthy scheduler hands a due wait back within a second. */
const WAIT_OVERDUE_AFTER_MS = 60_000;
