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
