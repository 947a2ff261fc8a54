/**
 * Spaces out work to at most `perSecond` items a second: item k (0-based) starts no earlier than
 * k / perSecond seconds after the first, so N items take at least (N - 1) / perSecond seconds.
 * A merchant just back from an outage gets its backlog at a rate it can take.
 */
export class Pacer {
  private started?: number;
  private items = 0;

  constructor(
    private readonly perSecond: number,
    private readonly now: () => number = () => performance.now(),
    private readonly sleep: (ms: number) => Promise<void> = (ms) => new Promise((resolve) => setTimeout(resolve, ms)),
  ) {}

  /** Waits until `count` more items may start (all of them: the last one's slot). */
  async take(count: number): Promise<void> {
    if (count <= 0) return;
    this.started ??= this.now();
    const lastSlotMs = this.started + ((this.items + count - 1) * 1000) / this.perSecond;
    this.items += count;
    const wait = lastSlotMs - this.now();
    if (wait > 0) await this.sleep(Math.ceil(wait));
  }
}
