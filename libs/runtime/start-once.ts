/** A start that runs once: a second call gets the first call's promise, unless that one failed. */
export class StartOnce {
  private running?: Promise<void>;

  run(start: () => Promise<void>): Promise<void> {
    this.running ??= start().catch((err: unknown) => {
      this.running = undefined;
      throw err;
    });
    return this.running;
  }

  /** Resolves once a start under way has settled, whatever its outcome. */
  settled(): Promise<void> {
    return this.running?.then(() => {}, () => {}) ?? Promise.resolve();
  }
}
