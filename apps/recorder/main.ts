#!/usr/bin/env node
import { devModeWarning, tracingSettingsOf, withDevDefaults } from '../../libs/config/index.js';
import { createLogger } from '../../libs/logger/index.js';
import { startTracing, stoppingTracing } from '../../libs/tracing/index.js';
import { runUntilSignal } from '../../libs/runtime/index.js';
import { loadRecorderConfig } from './config.js';
import { startRecorder } from './program.js';

let config;
try {
  config = loadRecorderConfig(withDevDefaults(process.env).env);
} catch (err) {
  process.stderr.write(`${(err as Error).message}\n`);
  process.exit(1);
}
const logger = createLogger({ level: config.LOG_LEVEL, service: 'recorder' });
const devMode = devModeWarning(process.env);
if (devMode) logger.warn(devMode.message, devMode.fields);
// Before the program: the SDK (loaded only when OTEL variables configure it) must be registered before the first span.
const tracing = await startTracing(tracingSettingsOf(config, 'webhooks-recorder'), logger);
await runUntilSignal('recorder', async (signal) => stoppingTracing(await startRecorder(config, logger, { signal }), tracing), logger);
