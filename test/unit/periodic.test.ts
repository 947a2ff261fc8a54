import { describe, expect, it } from '@jest/globals';
import { Periodic } from '../../libs/runtime/periodic.js';

/** A promise and its resolve, to hold a round open until the test lets it end. */
function gate(): { promise: Promise<void>; open: () => void } {
  let open!: () => void;
  const promise = new Promise<void>((resolve) => (open = resolve));
  return { promise, open };
}

async function until(check: () => boolean, ms = 2_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!check()) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((resolve) => setImmediate(resolve));
  }
}

/** `promise`, or a rejection naming what did not end in `ms`. */
function settles<T>(what: string, promise: Promise<T>, ms = 2_000): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_resolve, reject) => (timer = setTimeout(() => reject(new Error(`${what} did not resolve in ${ms} ms`)), ms)));
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

describe('Periodic', () => {
  it('a start() right after a stop() (a round under way) runs one loop, never two rounds at once', async () => {
    let running = 0;
    let most = 0;
    let rounds = 0;
    let hold = gate();
    const loop = new Periodic(async () => {
      rounds++;
      most = Math.max(most, ++running);
      await hold.promise;
      running--;
    }, () => 5);
    void loop.start();
    await until(() => rounds === 1);
    const stopped = loop.stop();
    void loop.start();
    hold.open();
    await settles('the first stop()', stopped);
    hold = gate();
    await until(() => rounds >= 3 || most > 1);
    hold.open();
    await until(() => rounds >= 6 || most > 1);
    hold.open();
    await settles('the last stop()', loop.stop());
    expect(most).toBe(1);
  });

  it('a start() right after a stop() during its wait leaves one loop: rounds keep their period', async () => {
    const at: number[] = [];
    const loop = new Periodic(() => void at.push(Date.now()), () => 50);
    await loop.start();
    const stopped = loop.stop();
    void loop.start();
    await settles('the first stop()', stopped);
    const since = at.length;
    await until(() => at.length >= since + 4, 5_000);
    await settles('the last stop()', loop.stop());
    // Two loops each every 50 ms: two rounds a few ms apart again and again.
    const gaps = at.slice(since).map((t, i, all) => (i === 0 ? 50 : t - all[i - 1]!));
    expect(Math.min(...gaps)).toBeGreaterThanOrEqual(40);
  });

  it('after stop() resolves, no round runs', async () => {
    let rounds = 0;
    const loop = new Periodic(() => void rounds++, () => 1);
    await loop.start();
    await loop.stop();
    const seen = rounds;
    await new Promise((resolve) => setTimeout(resolve, 30));
    expect(rounds).toBe(seen);
  });
});
