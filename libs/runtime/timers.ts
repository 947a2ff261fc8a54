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
