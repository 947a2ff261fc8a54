import type { Logger } from '../logger/index.js';

/**
 * Runs a program until SIGTERM or SIGINT, then stops it within a bound and exits 0; start-up
 * errors print one line naming the problem and exit 1. Signals are handled from the first
 * moment: one that arrives during start-up stops the program as soon as it has started.
 */
export async function runUntilSignal(
  name: string,
  start: () => Promise<{ stop(): Promise<void>; fatal?: Promise<Error> }>,
  logger?: Logger,
  stopTimeoutMs = 35_000,
): Promise<void> {
  let signalled: string | undefined;
  let started: ((signal: string) => void) | undefined;
  const onSignal = (signal: string) => {
    if (signalled) return;
    signalled = signal;
    logger?.info('shutting down', { signal });
    const force = setTimeout(() => {
      logger?.error('shutdown timed out', { timeoutMs: stopTimeoutMs });
      process.exit(1);
    }, stopTimeoutMs);
    force.unref();
    started?.(signal);
  };
  process.on('SIGTERM', () => onSignal('SIGTERM'));
  process.on('SIGINT', () => onSignal('SIGINT'));

  let program: { stop(): Promise<void>; fatal?: Promise<Error> };
  try {
    program = await start();
  } catch (err) {
    process.stderr.write(`${name} could not start: ${(err as Error).message}\n`);
    process.exit(1);
  }
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
  // A failure the program cannot recover from while running (a topology mismatch found on a
  // reconnect): stop what still runs and exit 1, so a supervisor sees it and restarts or alerts.
  void program.fatal?.then((err) => {
    if (signalled) return;
    signalled = 'fatal';
    process.stderr.write(`${name} stopped: ${err.message}\n`);
    const force = setTimeout(() => process.exit(1), stopTimeoutMs);
    force.unref();
    program.stop().finally(() => process.exit(1));
  });
}
