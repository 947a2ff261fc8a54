import { BrokerConnection } from '../../libs/broker/index.js';
import { createGotClient, createUndiciClient } from '../../libs/http/index.js';
import type { Logger } from '../../libs/logger/index.js';
import { FileMerchantDirectory } from '../../libs/merchants/index.js';
import { declareTopology } from '../../libs/topology/index.js';
import type { DispatcherConfig } from './config.js';
import { Dispatcher } from './dispatcher.js';

export const USER_AGENT = 'nucleus-webhooks/0.1 (+https://github.com/standard-webhooks/standard-webhooks)';

export interface DispatcherProgram {
  dispatcher: Dispatcher;
  broker: BrokerConnection;
  stop(): Promise<void>;
}

/** Wires the dispatcher from parsed config: directory, broker (topology on every connect), HTTP client. */
export async function startDispatcher(config: DispatcherConfig, logger: Logger): Promise<DispatcherProgram> {
  const merchants = new FileMerchantDirectory(config.MERCHANTS_FILE, logger).watch();
  const broker = new BrokerConnection({
    url: config.RABBITMQ_URL,
    name: 'webhooks-dispatcher',
    logger,
    declare: (channel) =>
      declareTopology(channel, {
        prefix: config.TOPOLOGY_PREFIX,
        retryDelaysMs: config.RETRY_SCHEDULE,
        failedRetention: config.FAILED_RETENTION,
      }),
  });
  try {
    await broker.open();
  } catch (err) {
    await merchants.close();
    throw err;
  }
  const http =
    config.HTTP_CLIENT === 'got'
      ? createGotClient({ allowPrivateTargets: config.ALLOW_PRIVATE_TARGETS })
      : createUndiciClient({ allowPrivateTargets: config.ALLOW_PRIVATE_TARGETS });
  const dispatcher = new Dispatcher(
    { broker, merchants, http, logger },
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
  let stopping: Promise<void> | undefined;
  return {
    dispatcher,
    broker,
    stop() {
      stopping ??= (async () => {
        await dispatcher.stop();
        await broker.close();
        http.close();
        await merchants.close();
      })();
      return stopping;
    },
  };
}
