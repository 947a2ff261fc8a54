import { NamedError } from '../../libs/runtime/index.js';

/** A read refused because its merchant already has as many in flight, and waiting, as allowed. */
export class TooManyInFlightError extends NamedError {
  constructor(readonly retryAfterSeconds: number) {
    super('too many queries in flight for this key');
  }
}

/**
 * At most `perKey` operations in flight per key (a merchant); the next `queue` wait in arrival order, each at
 * most `waitMs`; any more are refused. It keeps one merchant's heavy reads from filling this instance's pool.
 */
export class KeyedConcurrency {
  private readonly keys = new Map<string, { running: number; waiting: Array<() => void> }>();

  constructor(private readonly perKey: number, private readonly queue: number, private readonly waitMs: number) {}

  async run<T>(key: string, work: () => Promise<T>): Promise<T> {
    await this.acquire(key);
    try {
      return await work();
    } finally {
      this.release(key);
    }
  }

  private acquire(key: string): Promise<void> {
    const entry = this.keys.get(key) ?? { running: 0, waiting: [] };
    this.keys.set(key, entry);
    if (entry.running < this.perKey) {
      entry.running += 1;
      return Promise.resolve();
    }
    const retryAfterSeconds = Math.max(1, Math.ceil(this.waitMs / 1000));
    if (entry.waiting.length >= this.queue) return Promise.reject(new TooManyInFlightError(retryAfterSeconds));
    return new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        entry.waiting.splice(entry.waiting.indexOf(start), 1);
        reject(new TooManyInFlightError(retryAfterSeconds));
      }, this.waitMs);
      const start = () => {
        clearTimeout(timer);
        resolve();
      };
      entry.waiting.push(start);
    });
  }

  private release(key: string): void {
    const entry = this.keys.get(key)!;
    // The slot passes straight to the next in line, so a newcomer cannot overtake the queue.
    const next = entry.waiting.shift();
    if (next) return next();
    entry.running -= 1;
    if (entry.running === 0) this.keys.delete(key);
  }
}
