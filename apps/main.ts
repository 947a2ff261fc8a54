#!/usr/bin/env node
/** `npm start`: the API and the dispatcher in one process, and in development mode the demo merchant. */
import { once } from 'node:events';
import { DEV_MERCHANTS_FILE } from '../libs/config/index.js';
import type { Database } from '../libs/delivery-store/index.js';
import { readMerchantsFile } from '../libs/merchants/index.js';
import { type Running, runProgram } from '../libs/runtime/index.js';
import { loadApiConfig } from './api/config.js';
import { startApi } from './api/program.js';
import { createDemoReceiver } from './demo-receiver/server.js';
import { loadDispatcherConfig } from './dispatcher/config.js';
import { startDispatcher } from './dispatcher/program.js';
import { openDevDatabase, PGLITE_DIR } from './recorder/open-log.js';
import { startRecorder } from './recorder/program.js';

/** The dispatcher's settings lead (log level, tracing); the stop takes both programs' SHUTDOWN_TIMEOUT. */
function loadConfig(env: Record<string, string | undefined>) {
  const dispatcher = loadDispatcherConfig(env);
  // One process: METRICS_PORT is the dispatcher's; the API keeps /metrics on PORT.
  const api = loadApiConfig({ ...env, METRICS_PORT: undefined });
  return { ...dispatcher, SHUTDOWN_TIMEOUT: api.SHUTDOWN_TIMEOUT + dispatcher.SHUTDOWN_TIMEOUT, dispatcher, api };
}

await runProgram(process.env, 'webhooks', loadConfig, async ({ dispatcher: dispatcherConfig, api: apiConfig }, logger, { signal }) => {
  // Stopped in this order: the API first (no new resends), the dispatcher drains, then the demo merchant.
  const running: Running[] = [];
  const stopAll = async () => {
    for (const program of running) await program.stop();
  };
  try {
    // One database for every program: the embedded PGlite only one process can open (and migrates).
    let database: Database | undefined;
    if (!apiConfig.DATABASE_URL) {
      logger.warn('development mode: merchants and the delivery log in an embedded PGlite database', { dir: PGLITE_DIR });
      const opened = (database = await openDevDatabase(logger));
      running.push({ stop: () => opened.close() });
    }
    if (dispatcherConfig.WEBHOOKS_DEV) {
      logger.warn('development defaults: demo merchants, a development token secret and secrets key', { merchantsFile: DEV_MERCHANTS_FILE });
      const { endpoints } = readMerchantsFile(DEV_MERCHANTS_FILE).find((merchant) => merchant.id === 'm_demo')!;
      // Its endpoints are paths of this receiver, each verified with its own secret.
      const secretsByPath = Object.fromEntries(endpoints.map((endpoint) => [new URL(endpoint.url).pathname, endpoint.secret]));
      const receiver = createDemoReceiver({ secret: endpoints[0]!.secret, secretsByPath, logger: logger.child({ service: 'demo-merchant' }) });
      // Where its endpoints point: a test's copy of the file names a free port.
      receiver.listen(Number(new URL(endpoints[0]!.url).port), '127.0.0.1');
      await once(receiver, 'listening');
      logger.info('demo merchant receiver listening', { urls: endpoints.map((endpoint) => endpoint.url) });
      running.push({ stop: () => new Promise((resolve) => receiver.close(() => resolve())) });
    }
    running.unshift(await startDispatcher(dispatcherConfig, logger.child({ service: 'dispatcher' }), { signal, database }));
    // On the embedded database the API runs the recorder itself (openDeliveryLog).
    if (apiConfig.DELIVERY_LOG === 'on' && apiConfig.DATABASE_URL) {
      running.unshift(await startRecorder({ ...apiConfig, METRICS_PORT: undefined }, logger.child({ service: 'recorder' }), { signal }));
    }
    running.unshift(await startApi(apiConfig, logger.child({ service: 'api' }), { signal, database }));
  } catch (err) {
    await stopAll();
    throw err;
  }
  return { stop: stopAll, fatal: Promise.race(running.flatMap((program) => program.fatal ?? [])) };
}, { tracingName: 'webhooks' });
