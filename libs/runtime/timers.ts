/** The longest delay a Node timer keeps: a longer one fires after 1 ms (and warns, each time). */
export const MAX_TIMER_MS = 2_147_483_647;

/** `work`'s answer, or a rejection ("no answer in N ms") once `ms` have passed: a caller that must not wait on a slow dependency. */
export function withDeadline<T>(work: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_resolve, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer in ${ms} ms`)), ms);
  });
  return Promise.race([work, late]).finally(() => clearTimeout(timer));
}

/** Settles with the promise, or with undefined once `ms` have passed: a shutdown step that cannot hang. */
export function within<T>(ms: number, promise: Promise<T>): Promise<T | undefined> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    promise.finally(() => clearTimeout(timer)),
    new Promise<undefined>((resolve) => {
      timer = setTimeout(() => resolve(undefined), Math.max(0, ms));
      timer.unref();
    }),
  ]);
}
