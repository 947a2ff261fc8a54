import { BrokerUnavailableError } from '../broker/index.js';

/**
 * Writers that append an entry to a stream and wait until their own tail reads it back, by id:
 * the verdict (who won a claim, which version applied) is what the reader saw in stream order.
 */
export class ReadBacks<T> {
  private readonly waiting = new Map<string, { timer: NodeJS.Timeout; settle: (value: T) => void }>();

  /** `onTimeout`: an entry did not come back; the tail checks it still reads (StreamTail.verifyLive). */
  constructor(private readonly onTimeout?: () => void) {}

  /**
   * Registers before the append, so an entry read back at once is not missed. Rejects with
   * BrokerUnavailableError naming `what` when nothing comes back within `timeoutMs`.
   */
  expect(id: string, timeoutMs: number, what: string): Promise<T> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiting.delete(id);
        this.onTimeout?.();
        reject(new BrokerUnavailableError(`${what} not read back within ${timeoutMs} ms`));
      }, timeoutMs);
      this.waiting.set(id, {
        timer,
        settle: (value) => {
          clearTimeout(timer);
          this.waiting.delete(id);
          resolve(value);
        },
      });
    });
  }

  /** The tail read the entry with this id back: its writer learns `value`. */
  settle(id: string, value: T): void {
    this.waiting.get(id)?.settle(value);
  }

  /** The writer gave up (its append failed): stop waiting; the promise never settles. */
  forget(id: string): void {
    clearTimeout(this.waiting.get(id)?.timer);
    this.waiting.delete(id);
  }
}
