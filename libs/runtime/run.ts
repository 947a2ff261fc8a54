import type { Logger } from '../logger/index.js';

export interface Running {
  stop(): Promise<void>;
  fatal?: Promise<Error>;
}

/** How long a stop may take when the program reads no SHUTDOWN_TIMEOUT. */
export const DEFAULT_STOP_TIMEOUT_MS = 35_000;

/**
 * Runs a program until SIGTERM or SIGINT, then stops it and exits 0; a start-up error exits 1, a
 * signal during start-up aborts `signal`, a stop past `stopTimeoutMs` exits 1. An unhandled
 * rejection stops it the same way, then exits 1: Node's own exit would drop the work in flight.
 */
export async function runUntilSignal(
  name: string,
  start: (signal: AbortSignal) => Promise<Running>,
  logger?: Logger,
  stopTimeoutMs = DEFAULT_STOP_TIMEOUT_MS,
): Promise<void> {
  const abort = new AbortController();
  let stopping: { why: string; code: number } | undefined;
  let started: (() => void) | undefined;
  const stop = (why: string, code: number) => {
    if (stopping) {
      stopping.code = Math.max(stopping.code, code);
      return;
    }
    stopping = { why, code };
    setTimeout(() => {
      logger?.error('shutdown timed out', { timeoutMs: stopTimeoutMs });
      process.exit(1);
    }, stopTimeoutMs + 1_000).unref();
    if (started) started();
    else abort.abort();
  };
  const onSignal = (signal: string) => {
    if (!stopping) logger?.info('shutting down', { signal });
    stop(signal, 0);
  };
  for (const signal of ['SIGTERM', 'SIGINT']) process.on(signal, () => onSignal(signal));
  process.on('unhandledRejection', (reason) => {
    logger?.error('unhandled promise rejection; shutting down', rejectionFields(reason));
    stop('unhandled rejection', 1);
  });

  const program = await start(abort.signal).catch((err: unknown) => {
    if (stopping?.code === 0) {
      logger?.info('start-up interrupted; stopped', { signal: stopping.why });
      process.exit(0);
    }
    process.stderr.write(`${name} could not start: ${(err as Error).message}\n`);
    process.exit(1);
  });
  started = () => {
    program.stop().then(
      () => process.exit(stopping!.code),
      (err: unknown) => {
        logger?.error('shutdown failed', { error: (err as Error).message });
        process.exit(1);
      },
    );
  };
  if (stopping) started();
  void program.fatal?.then((err) => {
    if (stopping) return;
    process.stderr.write(`${name} stopped: ${err.message}\n`);
    stop('fatal', 1);
  });
}

/** An error's name, message, code and stack, never its other fields (a request, a secret). */
function rejectionFields(reason: unknown): Record<string, unknown> {
  if (!(reason instanceof Error)) return { error: typeof reason === 'string' ? reason : `a rejection with a ${typeof reason}, not an Error` };
  const code = (reason as NodeJS.ErrnoException).code;
  return { error: reason.message, kind: reason.name, ...(typeof code === 'string' && { code }), stack: reason.stack };
}
