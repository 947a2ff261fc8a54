#!/usr/bin/env node
import { devModeWarning, tracingSettingsOf, withDevDefaults } from '../../libs/config/index.js';
import { createLogger } from '../../libs/logger/index.js';
import { startTracing, stoppingTracing } from '../../libs/tracing/index.js';
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
const devMode = devModeWarning(process.env);
if (devMode) logger.warn(devMode.message, devMode.fields);
// Before the program: the SDK (loaded only when OTEL variables configure it) must be registered before the first span.
const tracing = await startTracing(tracingSettingsOf(config, 'webhooks-api'), logger);
await runUntilSignal('api', async (signal) => stoppingTracing(await startApi(config, logger, { signal }), tracing), logger, config.SHUTDOWN_TIMEOUT);
