import type { Logger } from '../logger/index.js';

/**
 * Runs a program until SIGTERM or SIGINT, then stops it within a bound and exits 0; start-up
 * errors print one line naming the problem and exit 1.
 */
export async function runUntilSignal(
  name: string,
  start: () => Promise<{ stop(): Promise<void> }>,
  logger?: Logger,
  stopTimeoutMs = 35_000,
): Promise<void> {
  let program: { stop(): Promise<void> };
  try {
    program = await start();
  } catch (err) {
    process.stderr.write(`${name} could not start: ${(err as Error).message}\n`);
    process.exit(1);
  }
  let signalled = false;
  const shutdown = (signal: string) => {
    if (signalled) return;
    signalled = true;
    logger?.info('shutting down', { signal });
    const force = setTimeout(() => {
      logger?.error('shutdown timed out', { timeoutMs: stopTimeoutMs });
      process.exit(1);
    }, stopTimeoutMs);
    force.unref();
    program.stop().then(
      () => process.exit(0),
      (err: unknown) => {
        logger?.error('shutdown failed', { error: (err as Error).message });
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', () => shutdown('SIGTERM'));
  process.on('SIGINT', () => shutdown('SIGINT'));
}
