import { Writable } from 'node:stream';
import winston from 'winston';
import { activeIds } from '../tracing/spans.js';

export type Logger = winston.Logger;
export type LogLevel = 'error' | 'warn' | 'info' | 'debug';

const SECRET_KEYS = /secret|token|authorization|password|signature|publickey|apikey/i;

/** An ISO-8601 time: no secret, whatever its field's name says (previousSecretExpiresAt). */
const TIME = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$/;

const redact = winston.format((info) => {
  for (const key of Object.keys(info)) {
    if (SECRET_KEYS.test(key) && !(key.endsWith('At') && (info[key] === null || TIME.test(String(info[key]))))) info[key] = '[redacted]';
  }
  return info;
});

/** A line written inside a span names it, unless the line names its span itself (the dispatcher's explicit spans). */
const traceIds = winston.format((info) => (info.trace_id === undefined ? Object.assign(info, activeIds()) : info));

/** JSON lines on stdout: a fixed message plus metadata fields (merchantId, reference, event, attempt). */
export function createLogger(options: { level: LogLevel; service: string; silent?: boolean }): Logger {
  return winston.createLogger({
    level: options.level,
    silent: options.silent ?? false,
    defaultMeta: { service: options.service },
    format: winston.format.combine(redact(), traceIds(), winston.format.timestamp(), winston.format.json()),
    transports: [new winston.transports.Console()],
  });
}

export function silentLogger(): Logger {
  return createLogger({ level: 'error', service: 'silent', silent: true });
}

/** A logger for the CLI: "message (kind): error", nothing else of its fields (no merchant data or secret). */
export function lineLogger(write: (line: string) => void, level: LogLevel = 'error'): Logger {
  const lines = new Writable({
    objectMode: true,
    write(info: Record<string, unknown>, _encoding, done) {
      const kind = typeof info.kind === 'string' ? ` (${info.kind})` : '';
      write(`${String(info.message)}${kind}${info.error === undefined ? '' : `: ${String(info.error)}`}`);
      done();
    },
  });
  return winston.createLogger({ level, transports: [new winston.transports.Stream({ stream: lines })] });
}
