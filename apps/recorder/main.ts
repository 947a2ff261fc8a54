#!/usr/bin/env node
import { withDevDefaults } from '../../libs/config/index.js';
import { createLogger } from '../../libs/logger/index.js';
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
await runUntilSignal('recorder', () => startRecorder(config, logger), logger);
