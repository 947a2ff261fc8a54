/**
 * A start that runs once: a second call, while it runs or after it succeeded, gets the first call's
 * promise (a second start added a second consumer, listener or timer that stop() never ended); one
 * that failed may be called again, as a program retrying its start-up does.
 */
export class StartOnce {
  private running?: Promise<void>;

  run(start: () => Promise<void>): Promise<void> {
    this.running ??= start().catch((err: unknown) => {
      this.running = undefined;
      throw err;
    });
    return this.running;
  }

  /** Resolves once a start under way has settled, whatever its outcome: what a stop waits for. */
  settled(): Promise<void> {
    return this.running?.then(
      () => {},
      () => {},
    ) ?? Promise.resolve();
  }
}
