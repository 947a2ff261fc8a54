/** The longest delay a Node timer keeps: a longer one fires after 1 ms. */
export const MAX_TIMER_MS = 2_147_483_647;

/** Settles with the promise, or once `ms` have passed: with undefined, or rejecting when `late` is 'reject'. */
export function within<T>(ms: number, promise: Promise<T>): Promise<T | undefined>;
export function within<T>(ms: number, promise: Promise<T>, late: 'reject'): Promise<T>;
export function within<T>(ms: number, promise: Promise<T>, late?: 'reject'): Promise<T | undefined> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    promise.finally(() => clearTimeout(timer)),
    new Promise<undefined>((resolve, reject) => {
      const end = () => (late ? reject(new Error(`no answer in ${ms} ms`)) : resolve(undefined));
      timer = setTimeout(end, Math.max(0, ms)).unref();
    }),
  ]);
}
