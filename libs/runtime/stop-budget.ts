import type { Logger } from '../logger/index.js';

/** A stop's time budget: a step that overruns or fails is logged and left behind, so the stop ends in time. */
export function stopBudget(timeoutMs: number, logger: Logger) {
  const deadline = Date.now() + timeoutMs;
  const onProblem = (step: string, error?: Error) => logger.warn('shutdown step did not finish in time; going on', { step, error: error?.message });
  return {
    left: () => Math.max(0, deadline - Date.now()),
    async step(name: string, run: () => Promise<unknown>, capMs = Infinity): Promise<void> {
      const ms = Math.min(capMs, Math.max(0, deadline - Date.now()));
      let timer: NodeJS.Timeout | undefined;
      const overran = await Promise.race([
        Promise.resolve().then(run).then(
          () => false,
          (err: unknown) => {
            onProblem(name, err as Error);
            return false;
          },
        ),
        new Promise<boolean>((resolve) => {
          timer = setTimeout(() => resolve(true), ms);
          timer.unref();
        }),
      ]);
      clearTimeout(timer);
      if (overran) onProblem(name);
    },
  };
}
