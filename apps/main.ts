#!/usr/bin/env node
/**
 * `npm start`: every program in one process with the defaults. With the development merchants file
 * (the default) it also runs the demo merchant receiver its merchants point at, so a fresh clone
 * shows webhooks arriving and verified.
 */
import { once } from 'node:events';
import { createLogger } from '../libs/logger/index.js';
import { FileMerchantDirectory } from '../libs/merchants/index.js';
import { runUntilSignal } from '../libs/runtime/index.js';
import { createDemoReceiver } from './demo-receiver/server.js';
import { loadDispatcherConfig } from './dispatcher/config.js';
import { startDispatcher } from './dispatcher/program.js';

const DEV_MERCHANTS = 'config/merchants.dev.json';
const DEMO_PORT = 4400;

let config;
try {
  config = loadDispatcherConfig(process.env);
} catch (err) {
  process.stderr.write(`${(err as Error).message}\n`);
  process.exit(1);
}
const logger = createLogger({ level: config.LOG_LEVEL, service: 'webhooks' });

await runUntilSignal(
  'webhooks',
  async () => {
    const stops: Array<() => Promise<void>> = [];
    if (config.MERCHANTS_FILE === DEV_MERCHANTS) {
      const demo = new FileMerchantDirectory(DEV_MERCHANTS, logger).byId('m_demo');
      const receiver = createDemoReceiver({ secret: demo!.webhook!.secret, logger: logger.child({ service: 'demo-merchant' }) });
      receiver.listen(DEMO_PORT, '127.0.0.1');
      await once(receiver, 'listening');
      logger.info('demo merchant receiver listening', { url: `http://127.0.0.1:${DEMO_PORT}/webhooks` });
      stops.push(() => new Promise((resolve) => receiver.close(() => resolve())));
    }
    const dispatcher = await startDispatcher(config, logger.child({ service: 'dispatcher' }));
    stops.unshift(() => dispatcher.stop());
    return {
      async stop() {
        for (const stop of stops) await stop();
      },
    };
  },
  logger,
);
