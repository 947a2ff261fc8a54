import { Gauge, type Registry } from 'prom-client';
import { METRIC_NAMES } from '../../libs/metrics/index.js';
import type { Throttle } from './stages/throttle.js';

/** webhooks_endpoint_rate_per_second {merchant}: the rate each limited endpoint was last sent at by this dispatcher. */
export function throttleMetrics(registry: Registry, throttle: Throttle): void {
  new Gauge({
    name: METRIC_NAMES.endpointRate,
    help: 'Webhooks per second a throttled endpoint is sent at: its maxPerSecond, or lower while its 429/503 answers slow it',
    labelNames: ['merchant'],
    registers: [registry],
    collect() {
      this.reset();
      for (const [merchant, rate] of throttle.rates()) this.labels(merchant).set(rate);
    },
  });
}
