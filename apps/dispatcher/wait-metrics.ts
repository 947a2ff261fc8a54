import type { Registry } from 'prom-client';
import { METRIC_NAMES, gaugeFrom } from '../../libs/metrics/index.js';
import type { WaitStore } from '../../libs/waits/index.js';

/** A wait this far past its due time is overdue: a healthy scheduler hands a due wait back within a second. */
const WAIT_OVERDUE_AFTER_MS = 60_000;

/** The waits' two gauges, from one count per scrape; while PostgreSQL does not answer they keep their last value. */
export function waitMetrics(registry: Registry, store: WaitStore): void {
  let last = { waiting: 0, overdue: 0 };
  let asking: Promise<typeof last> | undefined;
  const census = () => {
    asking ??= store.census(WAIT_OVERDUE_AFTER_MS).then(
      (counted) => (last = counted),
      () => last,
    ).finally(() => setTimeout(() => (asking = undefined), 1_000).unref());
    return asking;
  };
  gaugeFrom(registry, METRIC_NAMES.waiting, 'Webhooks waiting for their next attempt (rows of webhook_waits)', async () => (await census()).waiting);
  gaugeFrom(registry, METRIC_NAMES.waitsOverdue, 'Waits more than a minute past their due time', async () => (await census()).overdue);
}
