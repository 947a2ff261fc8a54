/**
 * A round of work run until stop(), each after the last one ended: at start() (after a wait,
 * `waitFirst`), then `everyMs()` after each, or after what the round returned (0: at once), or
 * after what `failed` answered for a round that threw. start() is safe twice and resolves once the
 * first round has ended; stop() resolves once a round under way has ended. The timer is unref'd.
 */
export class Periodic {
  private stopped = true;
  /** Bumped by each start(): a loop restarted before its round ended sees it is not the current one. */
  private generation = 0;
  private first?: Promise<void>;
  private loop?: Promise<void>;
  private timer?: NodeJS.Timeout;
  private wake?: () => void;

  constructor(
    private readonly round: () => Promise<number | void> | void,
    private readonly everyMs: () => number,
    private readonly options: { waitFirst?: boolean; failed?: (err: unknown) => number | void } = {},
  ) {}

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

  private over(generation: number): boolean {
    return this.stopped || generation !== this.generation;
  }

  private async run(generation: number, previous: Promise<void> | undefined, ran: () => void): Promise<void> {
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
