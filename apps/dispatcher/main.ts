#!/usr/bin/env node
import { runUntilSignal } from '../../libs/runtime/index.js';
import { devModeWarning, tracingSettingsOf, withDevDefaults } from '../../libs/config/index.js';
import { createLogger } from '../../libs/logger/index.js';
import { startTracing, stoppingTracing } from '../../libs/tracing/index.js';
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
const devMode = devModeWarning(process.env);
if (devMode) logger.warn(devMode.message, devMode.fields);
// Before the program: the SDK (loaded only when OTEL variables configure it) must be registered before the first span.
// The dispatcher passes its spans by hand: no active context (stages/trace.ts).
const tracing = await startTracing(tracingSettingsOf(config, 'webhooks-dispatcher'), logger, { activeContext: false });
await runUntilSignal('dispatcher', async (signal) => stoppingTracing(await startDispatcher(config, logger, { signal }), tracing), logger, config.SHUTDOWN_TIMEOUT);
