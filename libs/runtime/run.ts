import type { Logger } from '../logger/index.js';

export interface Running {
  stop(): Promise<void>;
  fatal?: Promise<Error>;
}

/** How long a stop may take when the program sets none (the recorder, which reads no SHUTDOWN_TIMEOUT). */
export const DEFAULT_STOP_TIMEOUT_MS = 35_000;

/**
 * Runs a program until SIGTERM or SIGINT, then stops it and exits 0; a start-up error prints one
 * line and exits 1. A signal during start-up aborts `signal` (a broker that cannot be reached is
 * not waited for) and exits 0. A stop still running a moment past `stopTimeoutMs` exits 1.
 */
export async function runUntilSignal(
  name: string,
  start: (signal: AbortSignal) => Promise<Running>,
  logger?: Logger,
  stopTimeoutMs = DEFAULT_STOP_TIMEOUT_MS,
): Promise<void> {
  const abort = new AbortController();
  let signalled: string | undefined;
  let started: ((signal: string) => void) | undefined;
  const backstop = (code: number) => {
    const force = setTimeout(() => {
      logger?.error('shutdown timed out', { timeoutMs: stopTimeoutMs });
      process.exit(code);
    }, stopTimeoutMs + 1_000);
    force.unref();
  };
  const onSignal = (signal: string) => {
    if (signalled) return;
    signalled = signal;
    logger?.info('shutting down', { signal });
    backstop(1);
    if (started) started(signal);
    else abort.abort();
  };
  process.on('SIGTERM', () => onSignal('SIGTERM'));
  process.on('SIGINT', () => onSignal('SIGINT'));

  const program = await start(abort.signal).catch((err: unknown) => {
    if (signalled) {
      logger?.info('start-up interrupted; stopped', { signal: signalled });
      process.exit(0);
    }
    process.stderr.write(`${name} could not start: ${(err as Error).message}\n`);
    process.exit(1);
  });
  started = () => {
    program.stop().then(
      () => process.exit(0),
      (err: unknown) => {
        logger?.error('shutdown failed', { error: (err as Error).message });
        process.exit(1);
      },
    );
  };
  if (signalled) started(signalled);
  // A failure it cannot recover from (a topology mismatch found on a reconnect): exit 1 for a supervisor to see.
  void program.fatal?.then((err) => {
    if (signalled) return;
    signalled = 'fatal';
    process.stderr.write(`${name} stopped: ${err.message}\n`);
    backstop(1);
    program.stop().finally(() => process.exit(1));
  });
}
