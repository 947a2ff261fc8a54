/** Polls until the check returns a value other than undefined/false, or fails with what it waited for. */
export async function waitFor<T>(
  what: string,
  check: () => T | undefined | false | Promise<T | undefined | false>,
  timeoutMs = 10_000,
  intervalMs = 20,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined && value !== false) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}

/** Runs `work` until it does not throw (PostgreSQL back after a restart: a pooled connection it closed fails once), or fails with what it waited for. */
export async function once<T>(what: string, work: () => Promise<T>, timeoutMs = 30_000): Promise<T> {
  let result: T | undefined;
  await waitFor(what, async () => {
    try {
      result = await work();
      return true;
    } catch {
      return false;
    }
  }, timeoutMs, 100);
  return result as T;
}
