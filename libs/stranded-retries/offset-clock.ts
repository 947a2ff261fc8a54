/**
 * When this watch read the journal entry at an offset, to within `everyMs`: one sample per
 * `everyMs` of reading instead of a read time per body. A wait may point at its webhook's body
 * only while retention cannot drop that entry before the wait ends; the time given for an offset
 * is that of the last sample at or before it, never later than the entry's own, so the answer
 * errs toward "too old" (the body is journaled again), never toward a pointer that outlives its body.
 */
export class OffsetClock {
  private offsets: number[] = [];
  private times: number[] = [];

  constructor(private readonly everyMs = 10_000) {}

  /** An entry read at `at`; entries come in offset order and `at` never goes back. */
  read(offset: number, at: number): void {
    const last = this.times.length - 1;
    if (last >= 0 && (at - this.times[last]! < this.everyMs || offset <= this.offsets[last]!)) return;
    this.offsets.push(offset);
    this.times.push(at);
  }

  /** When the entry at `offset` was read at the earliest; undefined when before every sample. */
  readAtOf(offset: number): number | undefined {
    let lo = 0;
    let hi = this.offsets.length - 1;
    if (hi < 0 || offset < this.offsets[0]!) return undefined;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (this.offsets[mid]! <= offset) lo = mid;
      else hi = mid - 1;
    }
    return this.times[lo];
  }

  /** Samples read before `before` say nothing anyone asks about any more. */
  forgetBefore(before: number): void {
    let drop = 0;
    while (drop < this.times.length && this.times[drop]! < before) drop++;
    if (drop === 0) return;
    this.offsets = this.offsets.slice(drop);
    this.times = this.times.slice(drop);
  }

  clear(): void {
    this.offsets = [];
    this.times = [];
  }

  /** [offset, read ms before `now`], for a snapshot. */
  samples(now: number): Array<[number, number]> {
    return this.offsets.map((offset, i) => [offset, Math.round(now - this.times[i]!)]);
  }

  get size(): number {
    return this.offsets.length;
  }
}
