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
