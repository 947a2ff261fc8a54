#!/usr/bin/env node
import { withDevDefaults } from '../../libs/config/index.js';
import { createLogger } from '../../libs/logger/index.js';
import { runUntilSignal } from '../../libs/runtime/index.js';
import { loadApiConfig } from './config.js';
import { startApi } from './program.js';

let config;
try {
  config = loadApiConfig(withDevDefaults(process.env).env);
} catch (err) {
  process.stderr.write(`${(err as Error).message}\n`);
  process.exit(1);
}
const logger = createLogger({ level: config.LOG_LEVEL, service: 'api' });
await runUntilSignal('api', (signal) => startApi(config, logger, { signal }), logger, config.SHUTDOWN_TIMEOUT);
