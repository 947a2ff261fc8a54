/**
 * A round of work run again and again until stop(), each after the last one ended (two never
 * overlap, as setInterval's could): at start() (after a wait, `waitFirst`), then `everyMs()` after
 * each, or after what the round returned (0: at once, more is waiting), or after what `failed`
 * answered for a round that threw. start() is safe twice and resolves once the first round has
 * ended; stop() ends a wait at once and resolves once a round under way has ended; a start() after
 * it runs the rounds again, once that round has ended. The timer is unref'd: a loop never holds a program alive.
 */
export class Periodic {
  private stopped = true;
  /** Bumped by each start(): a loop stopped and started again before its round ended sees it is not the current one. */
  private generation = 0;
  private first?: Promise<void>;
  private loop?: Promise<void>;
  private timer?: NodeJS.Timeout;
  private wake?: () => void;

  constructor(
    private readonly round: () => Promise<number | void> | void,
    /** Asked at each wait: a clock's multiples, or options read after the constructor. */
    private readonly everyMs: () => number,
    private readonly options: { waitFirst?: boolean; failed?: (err: unknown) => number | void } = {},
  ) {}

  /** From start() to stop(): work a round goes on with beside the loop asks, to end with it. */
  get running(): boolean {
    return !this.stopped;
  }

  start(): Promise<void> {
    if (this.stopped) {
      this.stopped = false;
      const generation = ++this.generation;
      const previous = this.loop;
      this.first = new Promise((ran) => (this.loop = this.run(generation, previous, ran)));
    }
    return this.first!;
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    this.wake?.();
    await this.loop;
  }

  /** Stopped, or stopped and started again: that start()'s loop goes on, this one ends. */
  private over(generation: number): boolean {
    return this.stopped || generation !== this.generation;
  }

  private async run(generation: number, previous: Promise<void> | undefined, ran: () => void): Promise<void> {
    // A start() soon after a stop(): the stopped loop's round ends first, never two at once.
    await previous;
    let waitMs = this.options.waitFirst ? this.everyMs() : 0;
    for (;;) {
      if (waitMs > 0 && !this.over(generation)) {
        await new Promise<void>((resolve) => {
          this.wake = resolve;
          this.timer = setTimeout(resolve, waitMs).unref();
        });
      }
      if (this.over(generation)) return ran();
      try {
        waitMs = (await this.round()) ?? this.everyMs();
      } catch (err) {
        waitMs = this.options.failed?.(err) ?? this.everyMs();
      }
      ran();
    }
  }
}
