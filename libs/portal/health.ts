import { WEBHOOK_STATUSES, type WebhookStatus } from '../delivery-log/index.js';
import { LogQueryTimeoutError, LogUnavailableError, type Queryable } from '../delivery-store/index.js';

type Counts = Record<WebhookStatus, number>;
const noCounts = (): Counts => ({ delivered: 0, retrying: 0, failed: 0, skipped: 0 });

export type EndpointHealth = Awaited<ReturnType<typeof endpointHealth>>;

const HOUR_MS = 3_600_000;

/**
 * A merchant's last 24 hours from the delivery log: webhooks by status now, the success rate
 * (delivered out of decided), the attempts' median and p95 in ms, the 24 hours oldest first, and
 * the same counts per endpoint. The endpoint is one more grouping key: its counts cost no query.
 */
export async function endpointHealth(db: Queryable, merchantId: string) {
  const firstHour = Math.floor(Date.now() / HOUR_MS) * HOUR_MS - 23 * HOUR_MS;
  const since = new Date(firstHour).toISOString();
  const run = async <R>(text: string, params: unknown[]): Promise<R[]> => {
    try {
      return (await db.query<R>(text, params)).rows;
    } catch (err) {
      if ((err as { code?: string })?.code === '57014') throw new LogQueryTimeoutError(err);
      throw new LogUnavailableError(err);
    }
  };
  // One after the other: a read of one merchant holds one of the log's connections, as its concurrency limit counts.
  const byHour = await run<{ hour: Date | string; status: string; endpoint_id: string; n: string }>(
    // The UTC hour: date_trunc alone cuts at the session's time zone's hours (+05:30: half past).
    `SELECT date_trunc('hour', first_seen_at, 'UTC') AS hour, status, endpoint_id, count(*) AS n FROM delivery_webhooks
     WHERE merchant_id = $1 AND first_seen_at >= $2::timestamptz GROUP BY 1, 2, 3`,
    [merchantId, since],
  );
  const durations = await run<{ attempts: string; p50: number | null; p95: number | null }>(
    `SELECT count(*) AS attempts, percentile_cont(0.5) WITHIN GROUP (ORDER BY duration_ms) AS p50,
            percentile_cont(0.95) WITHIN GROUP (ORDER BY duration_ms) AS p95
     FROM delivery_records WHERE merchant_id = $1 AND at >= $2::timestamptz AND started_at IS NOT NULL AND duration_ms IS NOT NULL`,
    [merchantId, since],
  );
  const hours = Array.from({ length: 24 }, (_, i) => ({ hour: new Date(firstHour + i * HOUR_MS).toISOString(), ...noCounts() }));
  const totals = noCounts();
  const perEndpoint = new Map<string, { endpointId: string } & Counts>();
  for (const row of byHour) {
    const status = row.status as WebhookStatus;
    if (!WEBHOOK_STATUSES.includes(status)) continue;
    const bucket = hours[Math.floor((new Date(row.hour).getTime() - firstHour) / HOUR_MS)];
    const n = Number(row.n);
    if (bucket) bucket[status] += n;
    totals[status] += n;
    // '': logged before endpoints fanned out, not attributable to one.
    if (row.endpoint_id === '') continue;
    let counts = perEndpoint.get(row.endpoint_id);
    if (!counts) perEndpoint.set(row.endpoint_id, (counts = { endpointId: row.endpoint_id, ...noCounts() }));
    counts[status] += n;
  }
  const decided = totals.delivered + totals.failed;
  const stat = durations[0];
  const round = (value: number | null | undefined) => (value === null || value === undefined ? null : Math.round(Number(value)));
  return {
    since,
    ...totals,
    successRate: decided === 0 ? null : totals.delivered / decided,
    medianResponseMs: round(stat?.p50),
    p95ResponseMs: round(stat?.p95),
    attempts: Number(stat?.attempts ?? 0),
    hours,
    endpoints: [...perEndpoint.values()],
  };
}
