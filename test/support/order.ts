import { type EventName, sampleEvent, type UpstreamMessage } from '../../libs/contracts/index.js';
import type { Merchant } from '../../libs/merchants/index.js';
import { type Harness, startHarness, testMerchant } from './harness.js';
import { type ReceivedRequest, Receiver } from './receiver.js';
import { waitFor } from './wait.js';

type HarnessOptions = Parameters<typeof startHarness>[0];

/** An event of `event` whose order key (tnxRef, or a payout's reference) is `ref`. */
export function eventOf(event: EventName, merchantId: string, ref: string): UpstreamMessage {
  const sample = sampleEvent(event, merchantId);
  return { ...sample, data: { ...sample.data, ...(event === 'payout' ? { reference: ref } : { tnxRef: ref }) } };
}

export interface Timeline {
  first: number;
  last: number;
  done?: number;
}

/** Per webhook-id: when its first and last requests came, and when its first 2xx answer went (request numbers). */
export function timeline(requests: readonly ReceivedRequest[], delivered: ReadonlySet<number>): Map<string, Timeline> {
  const seen = new Map<string, Timeline>();
  requests.forEach((request, n) => {
    const id = String(request.headers['webhook-id']);
    const entry = seen.get(id) ?? { first: n, last: n };
    entry.last = n;
    if (entry.done === undefined && delivered.has(n)) entry.done = n;
    seen.set(id, entry);
  });
  return seen;
}

/**
 * The webhooks first sent while the one before them in their key's line (`rows`, ordered by key
 * then place, as webhook_order holds them) was not yet delivered (or, failed for good, attempted).
 */
export function sentOutOfOrder(rows: ReadonlyArray<{ order_key: string; webhook_id: string }>, line: ReadonlyMap<string, Timeline>): string[] {
  const early: string[] = [];
  rows.forEach((row, i) => {
    const before = rows[i - 1];
    if (!before || before.order_key !== row.order_key) return;
    const prior = line.get(before.webhook_id);
    const next = line.get(row.webhook_id);
    const priorEnd = prior?.done ?? prior?.last ?? -1;
    if (next !== undefined && next.first < priorEnd) early.push(row.webhook_id);
  });
  return early;
}

/**
 * A receiver that fails the attempts `fails` picks (the status it gives) and accepts the rest with
 * 204, counting each webhook-id's attempts; `delivered` holds the numbers of the requests accepted.
 */
export async function attemptReceiver(fails: (id: string, attempt: number, body: string) => number | undefined): Promise<{ receiver: Receiver; delivered: Set<number> }> {
  const tries = new Map<string, number>();
  const delivered = new Set<number>();
  const receiver = await Receiver.start((n, req) => {
    const id = String(req.headers['webhook-id']);
    const attempt = (tries.get(id) ?? 0) + 1;
    tries.set(id, attempt);
    const status = fails(id, attempt, req.body);
    if (status !== undefined) return status;
    delivered.add(n);
    return 204;
  });
  return { receiver, delivered };
}

/**
 * An ordered endpoint's charge of `reference` in flight (its first request hangs) and its refund
 * waiting behind it (`ids`: the charge's, the refund's); then `change` to the merchant, and the
 * dispatcher's channels close, so the broker gives the charge again. `prepare` runs on the harness
 * before the first publish. A step that fails closes what it started: left running, the dispatcher
 * kept Jest from ever exiting.
 */
export async function headGivenAgain(
  name: string,
  change: (endpoint: Merchant['endpoints'][number]) => Merchant['endpoints'],
  { reference, ids, options, prepare }: { reference: string; ids: [string, string]; options: Omit<HarnessOptions, 'name' | 'merchants'>; prepare?: (harness: Harness) => void },
): Promise<{ receiver: Receiver; harness: Harness; merchant: Merchant }> {
  const receiver = await Receiver.start((n) => (n === 0 ? 'hang' : 204));
  const merchant = testMerchant(`m_${name.replace(/-/g, '_')}`, receiver.url);
  merchant.endpoints[0]!.orderByReference = true;
  const harness = await startHarness({ name, merchants: [merchant], ...options });
  try {
    prepare?.(harness);
    await harness.publisher.publish(eventOf('charge.completed', merchant.id, reference), { messageId: ids[0] });
    await receiver.waitForRequests(1, 10_000);
    await harness.publisher.publish(eventOf('refund.completed', merchant.id, reference), { messageId: ids[1] });
    await waitFor('the refund waiting behind the charge', () => harness.dispatcher.stats.ordered === 1, 10_000);
    await harness.setMerchants([{ ...merchant, endpoints: change(merchant.endpoints[0]!) }]);
    const channels = (harness.broker as unknown as { consumerChannels: Map<{ close(): Promise<void> }, unknown> }).consumerChannels;
    await Promise.all([...channels.keys()].map((ch) => ch.close().catch(() => {})));
  } catch (err) {
    await harness.close();
    await receiver.close();
    throw err;
  }
  return { receiver, harness, merchant };
}
