#!/usr/bin/env node
import { runUntilSignal } from '../../libs/runtime/index.js';
import { withDevDefaults } from '../../libs/config/index.js';
import { createLogger } from '../../libs/logger/index.js';
import { loadDispatcherConfig } from './config.js';
import { startDispatcher } from './program.js';

let config;
try {
  config = loadDispatcherConfig(withDevDefaults(process.env).env);
} catch (err) {
  process.stderr.write(`${(err as Error).message}\n`);
  process.exit(1);
}
const logger = createLogger({ level: config.LOG_LEVEL, service: 'dispatcher' });
await runUntilSignal('dispatcher', (signal) => startDispatcher(config, logger, { signal }), logger, config.SHUTDOWN_TIMEOUT);
