import type { DiagLogger } from '@opentelemetry/api';
import type { Logger } from '../logger/index.js';

/** What the SDK's BatchSpanProcessor warns once spans could be queued again after it dropped some. */
const DROPPED = /^Dropped (\d+) spans because maxQueueSize reached/;

/**
 * The SDK's warnings and errors as log lines, at most one of a kind a minute (a collector down
 * fails every export). Spans the batch processor dropped, its queue full, are summed and logged
 * as `tracing: spans dropped`; those still unreported when the drops stop, at the minute's end.
 */
export function droppedSpansReporter(logger: Logger, everyMs = 60_000): DiagLogger {
  let dropped = 0;
  let droppedTimer: NodeJS.Timeout | undefined;
  const reportDropped = () => {
    droppedTimer = undefined;
    if (dropped === 0) return;
    logger.warn('tracing: spans dropped', { dropped, reason: 'the batch span processor queue was full: the collector is slow or down' });
    dropped = 0;
    droppedTimer = setTimeout(reportDropped, everyMs).unref();
  };
  const lastAt = new Map<string, number>();
  const say = (message: string, level: 'error' | 'warning') => {
    const found = DROPPED.exec(message);
    if (found) {
      dropped += Number(found[1]);
      if (droppedTimer === undefined) reportDropped();
      return;
    }
    const now = Date.now();
    if (now - (lastAt.get(level) ?? -Infinity) < everyMs) return;
    lastAt.set(level, now);
    logger.warn(`tracing: exporter ${level}`, { detail: message.slice(0, 300) });
  };
  return {
    error: (message) => say(message, 'error'),
    warn: (message) => say(message, 'warning'),
    info: () => {},
    debug: () => {},
    verbose: () => {},
  };
}
