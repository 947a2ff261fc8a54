/**
 * What a start-up has opened so far, closed newest first when a later step fails. A close that
 * fails is passed over: the error that stopped start-up is the one worth reporting.
 */
export class Cleanup {
  private readonly closes: Array<() => unknown> = [];

  add(close: () => unknown): void {
    this.closes.push(close);
  }

  /** `start()`, or on its failure everything added closed and the failure thrown on. */
  async guard<T>(start: () => Promise<T>): Promise<T> {
    try {
      return await start();
    } catch (err) {
      for (const close of this.closes.splice(0).reverse()) await Promise.resolve().then(close).catch(() => {});
      throw err;
    }
  }
}
