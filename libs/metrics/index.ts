import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { EVENT_NAMES } from '../contracts/events.js';
import { FAILED_REASONS } from '../contracts/headers.js';
import { within } from '../runtime/timers.js';
import { METRIC_NAMES } from './names.js';
import { type CounterSeries, CounterSeriesSet, histogramObserver } from './series.js';

export { METRIC_NAMES };

export type Outcome = 'delivered' | 'retried' | 'failed' | 'invalid' | 'skipped' | 'deferred' | 'throttled' | 'circuit_open' | 'requeued' | 'superseded' | 'erased';

/** Outcomes counted by event (invalid, superseded and erased messages have no event: `unknown`). */
const PER_EVENT_OUTCOMES: readonly Outcome[] = ['delivered', 'retried', 'failed', 'skipped', 'deferred', 'throttled', 'circuit_open', 'requeued'];

/** One registry per program, with Node's default process metrics. */
export function createRegistry(program: string): Registry {
  const registry = new Registry();
  registry.setDefaultLabels({ program });
  collectDefaultMetrics({ register: registry });
  return registry;
}

const DURATION_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];

/** `platformEvents`: the operational event types, zeroed too when the platform's endpoint is set (OPERATIONAL_WEBHOOK_URL). */
export function deliveryMetrics(registry: Registry, platformEvents: readonly string[] = []) {
  const deliveriesSeries = new CounterSeriesSet(() => deliveries);
  const attemptsSeries = new CounterSeriesSet(() => attempts);
  const deliveries: Counter = new Counter({
    name: METRIC_NAMES.deliveries,
    help: 'Webhook deliveries by outcome and event',
    labelNames: ['outcome', 'event'],
    registers: [registry],
    collect: () => deliveriesSeries.fold(),
  });
  const attempts: Counter = new Counter({
    name: METRIC_NAMES.attempts,
    help: 'HTTP attempts to merchant endpoints by result',
    labelNames: ['result'],
    registers: [registry],
    collect: () => attemptsSeries.fold(),
  });
  const duration = new Histogram({
    name: METRIC_NAMES.deliveryDuration,
    help: 'Duration of one HTTP attempt to a merchant endpoint, seconds',
    labelNames: ['event', 'result'],
    buckets: DURATION_BUCKETS,
    registers: [registry],
  });
  // Every known series from start-up at 0, so that the dashboard's rates read 0, not "No data", on a quiet service.
  for (const outcome of PER_EVENT_OUTCOMES) for (const event of [...EVENT_NAMES, ...platformEvents]) deliveries.labels({ outcome, event }).inc(0);
  for (const outcome of ['invalid', 'superseded', 'erased'] as const) deliveries.labels({ outcome, event: 'unknown' }).inc(0);
  for (const result of ['success', 'failure']) attempts.labels({ result }).inc(0);
  const failed = zeroedCounter(registry, METRIC_NAMES.failed, 'Webhooks that went to the failed stream, by reason', 'reason', Object.values(FAILED_REASONS));
  const testOutcomes = ['delivered', 'failed', 'deferred', 'circuit_open', 'skipped'];
  const tests = zeroedCounter(registry, METRIC_NAMES.testDeliveries, 'Test events (sent from the portal) by outcome; also in webhooks_deliveries_total', 'outcome', testOutcomes);
  // Each label set's series found once, then updated in place.
  const outcomes = new Map<string, Map<string, CounterSeries>>();
  const durations = { success: new Map<string, (seconds: number) => void>(), failure: new Map<string, (seconds: number) => void>() };
  const success = attemptsSeries.series({ result: 'success' });
  const failure = attemptsSeries.series({ result: 'failure' });
  return {
    outcome: (outcome: Outcome, event: string) => {
      let byEvent = outcomes.get(outcome);
      if (!byEvent) outcomes.set(outcome, (byEvent = new Map()));
      let series = byEvent.get(event);
      if (!series) byEvent.set(event, (series = deliveriesSeries.series({ outcome, event })));
      series.pending++;
    },
    attempt: (succeeded: boolean, seconds: number, event: string) => {
      (succeeded ? success : failure).pending++;
      const result = succeeded ? 'success' : 'failure';
      const byEvent = durations[result];
      let observe = byEvent.get(event);
      if (!observe) byEvent.set(event, (observe = histogramObserver(duration, { event, result }, DURATION_BUCKETS)));
      observe(seconds);
    },
    /** A webhook went to `failed`, and why (FAILED_REASONS). */
    failed: (reason: string) => failed.labels(reason).inc(),
    /** A test event's delivery (the portal's), by outcome: also counted in outcome(), and here apart. */
    test: (outcome: Outcome) => tests.labels(outcome).inc(),
  };
}

/** What the dispatcher reports; a no-op by default so the library runs without Prometheus. */
export type DeliveryObserver = ReturnType<typeof deliveryMetrics>;
export const noopObserver: DeliveryObserver = { outcome: () => {}, attempt: () => {}, failed: () => {}, test: () => {} };

/** How long a scrape waits for PostgreSQL or RabbitMQ before it shows the value unknown (Prometheus's timeout: 10 s). */
export const SCRAPE_ASK_DEADLINE_MS = 3_000;

/**
 * `ask` one at a time (an answer serves the scrapes of the next second), and `unknown` past SCRAPE_ASK_DEADLINE_MS:
 * a silent dependency must not hold the scrape past Prometheus's timeout, which loses every series.
 */
export function askedPerScrape<T>(ask: () => Promise<T>, unknown: T): () => Promise<T> {
  let asking: Promise<T> | undefined;
  return () => {
    asking ??= ask().finally(() => setTimeout(() => (asking = undefined), 1_000).unref());
    return within(SCRAPE_ASK_DEADLINE_MS, asking, 'reject').catch(() => unknown);
  };
}

/** The waits' two gauges, from one count per scrape; NaN while it cannot be taken (WebhooksWaitsOverdue alerts on it). */
export function waitMetrics(registry: Registry, count: () => Promise<{ waiting: number; overdue: number }>): void {
  const census = askedPerScrape(count, { waiting: NaN, overdue: NaN });
  gaugeFrom(registry, METRIC_NAMES.waiting, 'Webhooks waiting for their next attempt (rows of webhook_waits)', async () => (await census()).waiting);
  gaugeFrom(registry, METRIC_NAMES.waitsOverdue, 'Waits more than a minute past their due time', async () => (await census()).overdue);
}

/** A gauge whose value is read when Prometheus scrapes, from a function of the program's state. */
export function gaugeFrom(registry: Registry, name: string, help: string, read: () => number | Promise<number>): Gauge {
  return new Gauge({
    name,
    help,
    registers: [registry],
    async collect() {
      this.set(await read());
    },
  });
}

/** A counter that follows a running total kept by the program, read when Prometheus scrapes. */
export function counterFrom(registry: Registry, name: string, help: string, read: () => number): Counter {
  let reported = 0;
  return new Counter({
    name,
    help,
    registers: [registry],
    collect() {
      const total = read();
      if (total > reported) this.inc(total - reported);
      reported = total;
    },
  });
}

/** A labelled gauge rebuilt at each scrape from a list of (labels, value). */
export function labelledGaugeFrom(registry: Registry, name: string, help: string, label: string, read: () => Array<[string, number]> | Promise<Array<[string, number]>>): Gauge {
  return new Gauge({
    name,
    help,
    labelNames: [label],
    registers: [registry],
    async collect() {
      const values = await read();
      this.reset();
      for (const [value, n] of values) this.set({ [label]: value }, n);
    },
  });
}

/** A counter whose every known label value exists from start-up at 0, so a dashboard shows 0 and not "No data". */
export function zeroedCounter(registry: Registry, name: string, help: string, label: string, values: readonly string[]): Counter {
  const counter = new Counter({ name, help, labelNames: [label], registers: [registry] });
  for (const value of values) counter.labels(value).inc(0);
  return counter;
}

/** The operational events' series: events published by type, webhooks turned off by reason. */
export type OperationalMetrics = ReturnType<typeof operationalMetrics>;

export function operationalMetrics(registry: Registry, types: readonly string[], reasons: readonly string[]) {
  const events = zeroedCounter(registry, METRIC_NAMES.operationalEvents, 'Operational events published, by type', 'type', types);
  const disabled = zeroedCounter(registry, METRIC_NAMES.endpointsDisabledTotal, 'Webhooks turned off, by the service (failing) or an operator (manual)', 'reason', reasons);
  return {
    published: (type: string) => events.labels(type).inc(),
    disabled: (reason: string) => disabled.labels(reason).inc(),
  };
}
