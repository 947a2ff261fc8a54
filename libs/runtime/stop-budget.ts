import type { Logger } from '../logger/index.js';
import { within } from './timers.js';

/** A stop's time budget: a step that overruns or fails is logged and left behind, so the stop ends in time. */
export function stopBudget(timeoutMs: number, logger: Logger) {
  const deadline = Date.now() + timeoutMs;
  const left = () => Math.max(0, deadline - Date.now());
  const onProblem = (step: string, error?: Error) => logger.warn('shutdown step did not finish in time; going on', { step, error: error?.message });
  return {
    left,
    async step(name: string, run: () => Promise<unknown>, capMs = Infinity): Promise<void> {
      const ended = Promise.resolve().then(run).then(
        () => true,
        (err: unknown) => {
          onProblem(name, err as Error);
          return true;
        },
      );
      if ((await within(Math.min(capMs, left()), ended)) === undefined) onProblem(name);
    },
  };
}

/** What a start-up has opened so far, closed newest first when a later step fails (a close's failure passed over). */
export class Cleanup {
  private readonly closes: Array<() => unknown> = [];

  add(close: () => unknown): void {
    this.closes.push(close);
  }

  async guard<T>(start: () => Promise<T>): Promise<T> {
    try {
      return await start();
    } catch (err) {
      for (const close of this.closes.splice(0).reverse()) await Promise.resolve().then(close).catch(() => {});
      throw err;
    }
  }
}
