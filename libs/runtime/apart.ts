/** What writeApart tells of each part, in the items' order. */
export interface Parts<T, R> {
  written(items: T[], result: R): void;
  /** Awaited before the next part is written. */
  refused(item: T, err: unknown): unknown;
}

/**
 * Writes `items` in one statement; one `refused` for what it carries is halved, and each half again,
 * until every refused item stands alone. Any other error is thrown at once. `refusedWith`: the
 * caller already had all of `items` refused with this error, so the halving starts at once.
 */
export async function writeApart<T, R>(items: readonly T[], write: (items: T[]) => Promise<R>, refused: (err: unknown, part: readonly T[]) => boolean, parts: Parts<T, R>, refusedWith?: { err: unknown }): Promise<void> {
  if (items.length === 0) return;
  let err = refusedWith?.err;
  if (refusedWith === undefined) {
    try {
      parts.written([...items], await write([...items]));
      return;
    } catch (thrown) {
      if (!refused(thrown, items)) throw thrown;
      err = thrown;
    }
  }
  if (items.length === 1) {
    await parts.refused(items[0]!, err);
    return;
  }
  const middle = Math.ceil(items.length / 2);
  await writeApart(items.slice(0, middle), write, refused, parts);
  await writeApart(items.slice(middle), write, refused, parts);
}
