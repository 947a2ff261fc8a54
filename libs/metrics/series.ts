import type { Counter, Histogram, LabelValues } from 'prom-client';

// Series updated per delivery without prom-client's per-call work (hashing and validating the label set).

/** One counter series: plain increments, handed to prom-client when the registry is read. */
export interface CounterSeries {
  pending: number;
  readonly labels: LabelValues<string>;
}

/** A counter's series by label set; pass fold() as the counter's `collect`. */
export class CounterSeriesSet {
  private readonly all: CounterSeries[] = [];

  constructor(private readonly counter: () => Counter<string>) {}

  series(labels: LabelValues<string>): CounterSeries {
    const series = { pending: 0, labels };
    this.all.push(series);
    return series;
  }

  /** Called by prom-client before it reads the counter (a scrape): whole numbers, so the totals are exact. */
  fold(): void {
    const counter = this.counter();
    for (const series of this.all) {
      if (series.pending === 0) continue;
      counter.inc(series.labels, series.pending);
      series.pending = 0;
    }
  }
}

/** prom-client's own record of one histogram series (lib/histogram.js), which observe() updates. */
interface HistogramEntry {
  labels: LabelValues<string>;
  bucketValues: Record<number, number>;
  sum: number;
  count: number;
}

/** An observe() that updates prom-client's record as its own does, in the same order; else it is its observe(). */
export function histogramObserver(histogram: Histogram<string>, labels: LabelValues<string>, buckets: readonly number[]): (value: number) => void {
  histogram.zero(labels);
  const entries = (histogram as unknown as { hashMap?: Record<string, HistogramEntry> }).hashMap;
  const entry = entries && Object.values(entries).find((e) => e.labels === labels);
  const bounds = [...buckets];
  if (!entry || typeof entry.sum !== 'number' || !bounds.every((b) => entry.bucketValues[b] === 0)) return (value) => histogram.observe(labels, value);
  return (value) => {
    if (!Number.isFinite(value)) throw new TypeError(`Value is not a valid number: ${value}`);
    entry.sum += value;
    entry.count += 1;
    for (const bound of bounds) {
      if (value <= bound) {
        entry.bucketValues[bound]! += 1;
        return;
      }
    }
  };
}
