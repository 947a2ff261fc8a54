#!/usr/bin/env node
/** The demo merchant on its own (compose's `demo-merchant`). Local demos only: anyone may call /down and /up. */
import { once } from 'node:events';
import { createLogger } from '../../libs/logger/index.js';
import { runUntilSignal } from '../../libs/runtime/index.js';
import { loadDemoReceiverConfig } from './config.js';
import { createDemoReceiver } from './server.js';

let config;
try {
  config = loadDemoReceiverConfig(process.env);
} catch (err) {
  process.stderr.write(`${(err as Error).message}\n`);
  process.exit(1);
}
const logger = createLogger({ level: config.LOG_LEVEL, service: 'demo-merchant' });

await runUntilSignal(
  'demo-merchant',
  async () => {
    const receiver = createDemoReceiver({ secret: config.DEMO_WEBHOOK_SECRET, logger });
    receiver.listen(config.DEMO_RECEIVER_PORT, config.DEMO_RECEIVER_HOST);
    // once() rejects on 'error', so a port already in use fails start-up with its reason.
    await once(receiver, 'listening');
    logger.info('demo merchant receiver listening', {
      url: `http://${config.DEMO_RECEIVER_HOST}:${config.DEMO_RECEIVER_PORT}/webhooks`,
    });
    // close() also closes the dispatcher's idle keep-alive sockets (Node 19 and later), which would otherwise hold it open.
    return { stop: () => new Promise<void>((resolve) => receiver.close(() => resolve())) };
  },
  logger,
);
