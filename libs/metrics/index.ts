import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { METRIC_NAMES } from './names.js';

export { METRIC_NAMES };

export type Outcome = 'delivered' | 'retried' | 'failed' | 'invalid' | 'skipped' | 'deferred' | 'circuit_open';

/** What the dispatcher reports; a no-op by default so the library runs without Prometheus. */
export interface DeliveryObserver {
  outcome(outcome: Outcome, event: string): void;
  attempt(succeeded: boolean, seconds: number, event: string): void;
}

export const noopObserver: DeliveryObserver = { outcome: () => {}, attempt: () => {} };

/** One registry per program, with Node's default process metrics. */
export function createRegistry(program: string): Registry {
  const registry = new Registry();
  registry.setDefaultLabels({ program });
  collectDefaultMetrics({ register: registry });
  return registry;
}

export function deliveryMetrics(registry: Registry): DeliveryObserver {
  const deliveries = new Counter({
    name: METRIC_NAMES.deliveries,
    help: 'Webhook deliveries by outcome and event',
    labelNames: ['outcome', 'event'],
    registers: [registry],
  });
  const attempts = new Counter({
    name: METRIC_NAMES.attempts,
    help: 'HTTP attempts to merchant endpoints by result',
    labelNames: ['result'],
    registers: [registry],
  });
  const duration = new Histogram({
    name: METRIC_NAMES.deliveryDuration,
    help: 'Duration of one HTTP attempt to a merchant endpoint, seconds',
    labelNames: ['event', 'result'],
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    registers: [registry],
  });
  return {
    outcome: (outcome, event) => deliveries.inc({ outcome, event }),
    attempt: (succeeded, seconds, event) => {
      const result = succeeded ? 'success' : 'failure';
      attempts.inc({ result });
      duration.observe({ event, result }, seconds);
    },
  };
}

/** A gauge whose value is read when Prometheus scrapes, from a function of the program's state. */
export function gaugeFrom(
  registry: Registry,
  name: string,
  help: string,
  read: () => number | Promise<number>,
): Gauge {
  return new Gauge({
    name,
    help,
    registers: [registry],
    async collect() {
      this.set(await read());
    },
  });
}

/** A labelled gauge rebuilt at each scrape from a list of (labels, value). */
export function labelledGaugeFrom(
  registry: Registry,
  name: string,
  help: string,
  label: string,
  read: () => Array<[string, number]> | Promise<Array<[string, number]>>,
): Gauge {
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
