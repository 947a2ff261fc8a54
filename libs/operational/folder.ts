import { MAX_TIMER_MS } from '../runtime/timers.js';

/**
 * Per key, at most one event per interval: the first goes out at once, the latest of those that follow
 * when the interval ends, with how many it stands for.
 */
export class IntervalFolder<T> {
  private readonly keys = new Map<string, { openUntil: number; folded: number; pending?: T; timer?: NodeJS.Timeout }>();

  constructor(
    private readonly intervalMs: number,
    private readonly emit: (item: T, suppressed: number) => void,
    private readonly now: () => number = Date.now,
  ) {}

  offer(key: string, item: T): void {
    const now = this.now();
    const state = this.keys.get(key);
    if (!state || (now >= state.openUntil && state.pending === undefined)) {
      // Keys remembered at most: past it the idle ones are forgotten (their next event goes out at once).
      if (!state && this.keys.size >= 10_000) this.prune(now);
      this.keys.set(key, { openUntil: now + this.intervalMs, folded: 0 });
      this.emit(item, 0);
      return;
    }
    state.folded++;
    state.pending = item;
    if (!state.timer) this.arm(key, state, now);
  }

  /** Releases at the interval's end, in steps a timer can wait (MAX_TIMER_MS). */
  private arm(key: string, state: { openUntil: number; timer?: NodeJS.Timeout }, now: number): void {
    const wait = Math.max(0, state.openUntil - now);
    state.timer = setTimeout(() => (wait > MAX_TIMER_MS ? this.arm(key, state, this.now()) : this.release(key)), Math.min(MAX_TIMER_MS, wait));
    state.timer.unref();
  }

  /** Sends every folded event now (a stopping program), each with its count. */
  flush(): void {
    for (const key of [...this.keys.keys()]) this.release(key);
    this.keys.clear();
  }

  private release(key: string): void {
    const state = this.keys.get(key);
    if (!state) return;
    clearTimeout(state.timer);
    state.timer = undefined;
    if (state.pending === undefined) return;
    const { pending, folded } = state;
    state.pending = undefined;
    state.folded = 0;
    state.openUntil = this.now() + this.intervalMs;
    this.emit(pending, folded - 1);
  }

  private prune(now: number): void {
    for (const [key, state] of this.keys) {
      if (state.pending === undefined && now >= state.openUntil) this.keys.delete(key);
    }
  }
}
