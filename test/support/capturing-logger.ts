import { Writable } from 'node:stream';
import winston from 'winston';
import { createLogger, type Logger } from '../../libs/logger/index.js';

/** A logger writing its JSON lines into `lines`, as the programs' loggers write them to stdout. */
export function capturingLogger(lines: Array<Record<string, unknown>>): Logger {
  const logger = createLogger({ level: 'info', service: 'tracing-test' });
  logger.clear();
  logger.add(new winston.transports.Stream({ stream: new Writable({ write: (chunk, _e, done) => (lines.push(JSON.parse(String(chunk))), done()) }) }));
  return logger;
}
