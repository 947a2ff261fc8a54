/** What writeApart tells of each part, in the items' order. */
export interface Parts<T, R> {
  /** These items' statement succeeded, with its result. */
  written(items: T[], result: R): void;
  /** This item alone was refused, with the error; what it returns is awaited before the next part is written. */
  refused(item: T, err: unknown): unknown;
}

/**
 * Writes `items` in one statement; one `refused` for what it carries (isDataRefusal; `refused` is
 * told the part, for a test that depends on its size) is halved, and each half halved again, until
 * every refused item stands alone: one row PostgreSQL will never take costs its own outcome and
 * about 2·log2(n) statements, not every item batched with it. Each part is told in order as it is
 * done. Any other error (PostgreSQL down, a connection lost, a timeout) is thrown at once: the items
 * not yet told are the caller's to try again, as a whole batch's are. `refusedWith`: the caller
 * already wrote all of `items` and had them refused with this error, which the same statement again
 * would meet again (a statement timeout: another 30 s): the halving starts at once (one item is told
 * refused with it).
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
