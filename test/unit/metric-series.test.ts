import { jest } from '@jest/globals';
import { Counter, Histogram, Registry } from 'prom-client';
import { EVENT_NAMES, FAILED_REASONS } from '../../libs/contracts/index.js';
import { deliveryMetrics, METRIC_NAMES, waitMetrics } from '../../libs/metrics/index.js';

/**
 * deliveryMetrics keeps its per-delivery series out of prom-client's per-call path; a scrape must
 * show exactly what prom-client's own inc() and observe() would have: compared here line by line,
 * float sums included, against the same calls made the plain way.
 */
describe('delivery metrics', () => {
  function plain(registry: Registry) {
    const deliveries = new Counter({ name: METRIC_NAMES.deliveries, help: 'Webhook deliveries by outcome and event', labelNames: ['outcome', 'event'], registers: [registry] });
    const attempts = new Counter({ name: METRIC_NAMES.attempts, help: 'HTTP attempts to merchant endpoints by result', labelNames: ['result'], registers: [registry] });
    const duration = new Histogram({
      name: METRIC_NAMES.deliveryDuration,
      help: 'Duration of one HTTP attempt to a merchant endpoint, seconds',
      labelNames: ['event', 'result'],
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
      registers: [registry],
    });
    const failed = new Counter({ name: METRIC_NAMES.failed, help: 'Webhooks that went to the failed stream, by reason', labelNames: ['reason'], registers: [registry] });
    // Every known series at 0 from start-up, as deliveryMetrics makes them.
    for (const outcome of ['delivered', 'retried', 'failed', 'skipped', 'deferred', 'throttled', 'circuit_open', 'requeued']) for (const event of EVENT_NAMES) deliveries.inc({ outcome, event }, 0);
    for (const outcome of ['invalid', 'superseded', 'erased']) deliveries.inc({ outcome, event: 'unknown' }, 0);
    for (const result of ['success', 'failure']) attempts.inc({ result }, 0);
    for (const reason of Object.values(FAILED_REASONS)) failed.inc({ reason }, 0);
    const tests = new Counter({ name: METRIC_NAMES.testDeliveries, help: 'Test events (sent from the portal) by outcome; also in webhooks_deliveries_total', labelNames: ['outcome'], registers: [registry] });
    for (const outcome of ['delivered', 'failed', 'deferred', 'circuit_open', 'skipped']) tests.inc({ outcome }, 0);
    return {
      outcome: (outcome: string, event: string) => deliveries.inc({ outcome, event }),
      attempt: (succeeded: boolean, seconds: number, event: string) => {
        attempts.inc({ result: succeeded ? 'success' : 'failure' });
        duration.observe({ event, result: succeeded ? 'success' : 'failure' }, seconds);
      },
      failed: (reason: string) => failed.inc({ reason }),
    };
  }

  it('scrapes the same text as prom-client fed call by call, before and after more deliveries', async () => {
    const mine = new Registry();
    const theirs = new Registry();
    for (const registry of [mine, theirs]) registry.setDefaultLabels({ program: 'dispatcher' });
    const observer = deliveryMetrics(mine);
    const reference = plain(theirs);
    let seed = 7;
    const random = () => ((seed = (seed * 48271) % 2147483647) / 2147483647);
    const events = ['payout', 'charge.completed', 'refund.completed'];
    const outcomes = ['delivered', 'retried', 'failed', 'deferred'] as const;
    const feed = (n: number) => {
      for (let i = 0; i < n; i++) {
        const event = events[Math.floor(random() * events.length)]!;
        const seconds = random() ** 3 * 40; // some past the last bound
        const ok = random() < 0.8;
        const outcome = outcomes[Math.floor(random() * outcomes.length)]!;
        for (const o of [observer, reference]) {
          o.attempt(ok, seconds, event);
          o.outcome(outcome, event);
          if (!ok && i % 7 === 0) o.failed('attempts-exhausted');
        }
      }
    };
    expect(await mine.metrics()).toBe(await theirs.metrics());
    expect(await mine.metrics()).toMatch(/^webhooks_deliveries_total\{outcome="delivered",event="payout",program="dispatcher"\} 0$/m);
    // The outcomes without an event too (operating.md: every known label at 0 from start-up), erased among them.
    for (const outcome of ['invalid', 'superseded', 'erased']) expect(await mine.metrics()).toMatch(new RegExp(`^webhooks_deliveries_total\\{outcome="${outcome}",event="unknown",program="dispatcher"\\} 0$`, 'm'));
    feed(1_000);
    expect(await mine.metrics()).toBe(await theirs.metrics());
    feed(500);
    expect(await mine.metrics()).toBe(await theirs.metrics());
    expect(await mine.metrics()).toMatch(/^webhooks_delivery_duration_seconds_bucket\{le="\+Inf",.*event="payout",result="success"\} \d+$/m);
  });
});

/**
 * The waits' gauges while PostgreSQL does not answer: unknown (NaN), not the last count. The last
 * count kept said 0 overdue for as long as the outage lasted (nothing handed back meanwhile), or an
 * old number for ever after the last good count.
 */
describe('wait metrics', () => {
  it('shows the count while it can be taken, and NaN (unknown) while it cannot, then the count again', async () => {
    jest.useFakeTimers({ doNotFake: ['nextTick', 'setImmediate', 'queueMicrotask'] });
    try {
      const registry = new Registry();
      let answer: (() => Promise<{ waiting: number; overdue: number }>) = async () => ({ waiting: 12, overdue: 3 });
      waitMetrics(registry, () => answer());
      const scrape = async () => {
        const text = await registry.metrics();
        const value = (name: string) => new RegExp(`^${name} (\\S+)$`, 'm').exec(text)?.[1];
        const shown = { waiting: value(METRIC_NAMES.waiting), overdue: value(METRIC_NAMES.waitsOverdue) };
        jest.advanceTimersByTime(1_000); // past the count's one-second reuse
        return shown;
      };
      expect(await scrape()).toEqual({ waiting: '12', overdue: '3' });
      answer = () => Promise.reject(new Error('connect ECONNREFUSED'));
      // prom-client writes `Nan`; Prometheus reads NaN in any case.
      expect(await scrape()).toEqual({ waiting: expect.stringMatching(/^nan$/i), overdue: expect.stringMatching(/^nan$/i) });
      answer = async () => ({ waiting: 0, overdue: 0 });
      expect(await scrape()).toEqual({ waiting: '0', overdue: '0' });
    } finally {
      jest.useRealTimers();
    }
  });

  it("shows NaN when the count does not answer (a partition: PostgreSQL silent, not refusing), before Prometheus's 10 s scrape timeout", async () => {
    jest.useFakeTimers({ doNotFake: ['nextTick', 'setImmediate', 'queueMicrotask'] });
    try {
      const registry = new Registry();
      // Its connection dropped only after twice the waits' statement timeout (20 s): the scrape hung
      // that long, Prometheus gave up at 10 s, and every series of the dispatcher went missing.
      waitMetrics(registry, () => new Promise(() => {}));
      const text = registry.metrics();
      await jest.advanceTimersByTimeAsync(5_000);
      const shown = await Promise.race([text, new Promise<string>((resolve) => setImmediate(() => resolve('still waiting after 5 s')))]);
      expect(shown).toMatch(new RegExp(`^${METRIC_NAMES.waitsOverdue} nan$`, 'mi'));
    } finally {
      jest.useRealTimers();
    }
  });
});
