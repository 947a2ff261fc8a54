import { clockState, IntervalFolder, shouldDisable, shouldRecordFailing } from '../../libs/operational/index.js';
import { MAX_ENDPOINTS_PER_MERCHANT, type PgMerchantDirectory, transitionsOf, withStatus, type Merchant, type Endpoint } from '../../libs/merchants/index.js';
import type { OperationalPublisher } from '../../libs/operational/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { Operations } from '../../apps/dispatcher/operations.js';
import type { IntakeEvent } from '../../apps/dispatcher/stages/intake.js';
import { waitFor } from '../support/wait.js';

const DAY = 86_400_000;

describe('the auto-disable rule', () => {
  const after = 5 * DAY;
  it('disables an endpoint whose attempts have all failed for ENDPOINT_DISABLE_AFTER, failures spread over a tenth of it', () => {
    expect(shouldDisable(0, 5 * DAY, 5 * DAY, after)).toBe(true);
    expect(shouldDisable(0, 6 * DAY, 6 * DAY, after)).toBe(true);
  });

  it('waits until the whole time has passed since the first failure after the last success', () => {
    expect(shouldDisable(0, 5 * DAY - 1, 5 * DAY - 1, after)).toBe(false);
  });

  it('never disables on a burst of failures followed by silence', () => {
    // Failed for an hour 5 days ago, nothing since: failures spread over 1 h, less than 12 h.
    expect(shouldDisable(0, 3_600_000, 5 * DAY, after)).toBe(false);
    expect(shouldDisable(0, DAY / 2, 5 * DAY, after)).toBe(true);
  });

  it('never disables with ENDPOINT_DISABLE_AFTER=0, or without a failing clock', () => {
    expect(shouldDisable(0, 100 * DAY, 100 * DAY, 0)).toBe(false);
    expect(shouldDisable(Number.NaN, 100 * DAY, 100 * DAY, after)).toBe(false);
  });

  it('records the failing clock once a dispatcher has seen only failures for a tenth of the time', () => {
    expect(shouldRecordFailing(0, DAY / 2 - 1, after)).toBe(false);
    expect(shouldRecordFailing(0, DAY / 2, after)).toBe(true);
    expect(shouldRecordFailing(0, 100 * DAY, 0)).toBe(false);
  });
});

describe("an endpoint's failing clock at a failed attempt", () => {
  const after = 5 * DAY;
  it('has none until a dispatcher records one', () => {
    expect(clockState(undefined, undefined, 0, after)).toBe('none');
  });

  it('runs while failures are recorded, and is refreshed once its last failure is a tenth old', () => {
    expect(clockState(0, 0, DAY / 4, after)).toBe('running');
    expect(clockState(0, 0, DAY / 2, after)).toBe('refresh');
    expect(clockState(0, 2 * DAY, 2 * DAY + DAY / 4, after)).toBe('running');
  });

  it('is due after ENDPOINT_DISABLE_AFTER of failures spread up to now', () => {
    expect(clockState(0, 4.8 * DAY, 5 * DAY, after)).toBe('due');
    expect(clockState(0, 4.8 * DAY, 5 * DAY - 1, after)).toBe('running');
    expect(clockState(0, 4.4 * DAY, 5 * DAY - 1, after)).toBe('refresh');
  });

  it('is stale after two tenths without a recorded failure: a burst followed by silence, or a clock kept for months, never disables', () => {
    expect(clockState(0, 3_600_000, 5 * DAY, after)).toBe('stale');
    expect(clockState(0, undefined, 90 * DAY, after)).toBe('stale');
    expect(clockState(0, 4 * DAY, 5 * DAY + 1, after)).toBe('stale');
  });
});

describe('folding operational events per interval', () => {
  it('sends the first at once, folds the rest, and sends the latest at the end of the interval with the count of the others', async () => {
    const sent: Array<[string, number]> = [];
    // The folder's clock stands still (its timer is real): on a loaded machine more than the 150 ms
    // passed between the release and the next offer, which then went out at once as a new interval's.
    const folder = new IntervalFolder<string>(150, (item, suppressed) => sent.push([item, suppressed]), () => 0);
    for (let i = 0; i < 1_000; i++) folder.offer('endpoint-a failing', `a${i}`);
    folder.offer('endpoint-b failing', 'b0');
    expect(sent).toEqual([
      ['a0', 0],
      ['b0', 0],
    ]);
    await waitFor('the interval to end', () => sent.length === 3, 2_000);
    expect(sent[2]).toEqual(['a999', 998]);
    // The next interval has begun: the next one waits for its end.
    folder.offer('endpoint-a failing', 'a1000');
    expect(sent).toHaveLength(3);
    folder.flush();
    expect(sent[3]).toEqual(['a1000', 0]);
  });

  it('folds for the whole of an interval longer than a timer can wait (OPERATIONAL_EVENT_INTERVAL=30d)', async () => {
    const sent: string[] = [];
    const folder = new IntervalFolder<string>(30 * DAY, (item) => sent.push(item));
    folder.offer('k', 'first');
    folder.offer('k', 'second');
    // Node fires a timer past 2^31 - 1 ms (24.8 days) at once: the second went out within 1 ms.
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(sent).toEqual(['first']);
    folder.flush();
    expect(sent).toEqual(['first', 'second']);
  });

  it('sends at once again after a quiet interval', () => {
    let now = 0;
    const sent: string[] = [];
    const folder = new IntervalFolder<string>(1_000, (item) => sent.push(item), () => now);
    folder.offer('k', 'first');
    now = 5_000;
    folder.offer('k', 'second');
    expect(sent).toEqual(['first', 'second']);
  });
});

describe('a webhook turned off or on by a write', () => {
  const now = new Date('2026-01-01T00:00:00.000Z');
  const webhook: Endpoint = { id: 'ep_m_hooks', url: 'https://m.example/hooks', enabled: true, secret: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw' };
  const merchant = (w: Endpoint): Merchant => ({ id: 'm_1', publicKey: 'pk_test_1', endpoints: [w] });

  it('says why and since when when an operator turns it off, and keeps both while it stays off', () => {
    const off = withStatus(webhook, { ...webhook, enabled: false }, now);
    expect(off).toMatchObject({ enabled: false, disabledReason: 'manual', disabledAt: now.toISOString() });
    const auto = { ...webhook, enabled: false, disabledReason: 'failing' as const, disabledAt: '2025-12-31T00:00:00.000Z', failingSince: '2025-12-26T00:00:00.000Z' };
    expect(withStatus(auto, { ...auto, events: ['payout'] }, now)).toMatchObject({ disabledReason: 'failing', disabledAt: auto.disabledAt, failingSince: auto.failingSince });
  });

  it('makes an operator\'s disable of a webhook already off (auto-disabled, or by the merchant) the operator\'s, and only an explicit one', () => {
    const auto = { ...webhook, enabled: false, disabledReason: 'failing' as const, disabledAt: '2025-12-31T00:00:00.000Z', failingSince: '2025-12-26T00:00:00.000Z' };
    expect(withStatus(auto, { ...auto }, now, 'operator', true)).toMatchObject({ disabledReason: 'manual', disabledBy: 'operator', disabledAt: now.toISOString(), failingSince: auto.failingSince });
    const own = { ...webhook, enabled: false, disabledReason: 'manual' as const, disabledBy: 'merchant' as const, disabledAt: '2025-12-31T00:00:00.000Z' };
    expect(withStatus(own, { ...own }, now, 'operator', true)).toMatchObject({ disabledReason: 'manual', disabledBy: 'operator', disabledAt: now.toISOString() });
    // The merchant's own disable of an auto-disabled one, or a write that only carries `enabled` over, keeps the reason.
    expect(withStatus(auto, { ...auto }, now, 'merchant', true)).toMatchObject({ disabledReason: 'failing', disabledAt: auto.disabledAt });
    expect(withStatus(auto, { ...auto }, now, 'operator', false)).toMatchObject({ disabledReason: 'failing', disabledAt: auto.disabledAt });
    // The operator's own disable, said again, keeps its time.
    const operator = { ...own, disabledBy: 'operator' as const };
    expect(withStatus(operator, { ...operator }, now, 'operator', true)).toMatchObject({ disabledBy: 'operator', disabledAt: operator.disabledAt });
  });

  it('starts over when turned on: no reason, no failing clock', () => {
    const auto = { ...webhook, enabled: false, disabledReason: 'failing' as const, disabledAt: '2025-12-31T00:00:00.000Z', failingSince: '2025-12-26T00:00:00.000Z' };
    expect(withStatus(auto, { ...auto, enabled: true }, now)).toEqual(webhook);
  });

  it('keeps the failing clock of an enabled webhook across an unrelated change, not across a new URL', () => {
    const failing = { ...webhook, failingSince: '2025-12-31T00:00:00.000Z' };
    expect(withStatus(failing, { ...failing, events: ['payout'] }, now).failingSince).toBe(failing.failingSince);
    expect(withStatus(failing, { ...failing, url: 'https://m.example/new' }, now).failingSince).toBeUndefined();
  });

  it('names the transitions for the operational events', () => {
    const off = merchant({ ...webhook, enabled: false, disabledReason: 'manual', disabledAt: now.toISOString() });
    const at = now.toISOString();
    expect(transitionsOf(merchant(webhook), off, now)).toEqual([{ kind: 'disabled', merchantId: 'm_1', endpointId: 'ep_m_hooks', url: webhook.url, reason: 'manual', at }]);
    expect(transitionsOf(off, merchant(webhook), now)).toEqual([{ kind: 'enabled', merchantId: 'm_1', endpointId: 'ep_m_hooks', url: webhook.url, at }]);
    expect(transitionsOf(merchant(webhook), merchant({ ...webhook, events: ['payout'] }), now)).toEqual([
      { kind: 'updated', merchantId: 'm_1', endpointId: 'ep_m_hooks', url: webhook.url, previousUrl: webhook.url, changed: ['events'], events: ['payout'], at },
    ]);
    const moved = merchant({ ...webhook, url: 'https://m.example/new', secret: 'whsec_bmV3LXNlY3JldC1uZXctc2VjcmV0' });
    expect(transitionsOf(merchant(webhook), moved, now).map((t) => [t.kind, t.changed ?? null])).toEqual([['updated', ['url']], ['secret_rotated', null]]);
    expect(transitionsOf(undefined, merchant(webhook), now)).toEqual([]);
    expect(transitionsOf(merchant(webhook), merchant(webhook), now)).toEqual([]);
  });

  it("names the endpoint a write changed, whichever of the merchant's it is; adding or deleting one announces nothing", () => {
    const other: Endpoint = { ...webhook, id: 'ep_m_other', url: 'https://m.example/other' };
    const both = (second: Endpoint): Merchant => ({ ...merchant(webhook), endpoints: [webhook, second] });
    const at = now.toISOString();
    expect(transitionsOf(both(other), both({ ...other, enabled: false, disabledReason: 'manual', disabledAt: at }), now)).toEqual([
      { kind: 'disabled', merchantId: 'm_1', endpointId: 'ep_m_other', url: other.url, reason: 'manual', at },
    ]);
    expect(transitionsOf(both(other), both({ ...other, secret: 'whsec_bmV3LXNlY3JldC1uZXctc2VjcmV0' }), now)).toEqual([{ kind: 'secret_rotated', merchantId: 'm_1', endpointId: 'ep_m_other', url: other.url, at }]);
    expect(transitionsOf(merchant(webhook), both(other), now)).toEqual([]);
    expect(transitionsOf(both(other), merchant(webhook), now)).toEqual([]);
  });
});

describe("a dispatcher's memory of successes per endpoint", () => {
  it("stays within a merchant's endpoints while they churn: 10,000 created, sent to and deleted in turn", () => {
    const merchant: Merchant = { id: 'm_churn', publicKey: 'pk_churn', endpoints: [] };
    const directory = { byId: (id: string) => (id === merchant.id ? merchant : undefined), byPublicKey: () => undefined, list: () => [merchant], close: async () => {} };
    const operations = new Operations(
      { merchants: directory, writer: {} as unknown as PgMerchantDirectory, publisher: { emit: () => {} } as unknown as OperationalPublisher, logger: silentLogger() },
      { disableAfterMs: 60_000, intervalMs: 3_600_000 },
    );
    const kept = (operations as unknown as { lastSuccess: Map<string, Map<string, unknown>> }).lastSuccess;
    for (let i = 0; i < 10_000; i++) {
      // One endpoint at a time: the last one deleted, a new one (a new id) created and sent to.
      const endpoint: Endpoint = { id: `ep_churn_${i}`, url: `https://churn.example/${i}`, enabled: true, secret: 'whsec_c2VjcmV0' };
      merchant.endpoints = [endpoint];
      const intake = { merchantId: merchant.id, endpointId: endpoint.id, event: 'payout', references: [], body: '{}', webhookId: `evt_${i}`, attempts: 0, deferrals: 0, postponements: 0, firstSeenAt: new Date(0).toISOString(), accepted: false } as IntakeEvent;
      operations.observe(intake, { kind: 'delivered', attempt: 1, status: 204 }, new Date(1_000 + i));
    }
    // Its deleted endpoints' ids were kept, one entry each, the outer bound counting merchants only.
    expect(kept.get(merchant.id)!.size).toBeLessThanOrEqual(MAX_ENDPOINTS_PER_MERCHANT);
    expect(kept.get(merchant.id)!.has('ep_churn_9999')).toBe(true);
  });
});

describe('the endpoint a message.attempt.* event names', () => {
  it('is the one the webhook was for, even once it is deleted mid-retry (its webhook then goes to failed)', () => {
    const merchant: Merchant = { id: 'm_gone', publicKey: 'pk_gone', endpoints: [{ id: 'ep_m_gone_other', url: 'https://gone.example/other', enabled: true, secret: 'whsec_c2VjcmV0' }] };
    const directory = { byId: (id: string) => (id === merchant.id ? merchant : undefined), byPublicKey: () => undefined, list: () => [merchant], close: async () => {} };
    const emitted: Array<{ event: { type: string; data: Record<string, unknown> } }> = [];
    const publisher = { emit: (event: (typeof emitted)[number]) => void emitted.push(event) } as unknown as OperationalPublisher;
    const operations = new Operations({ merchants: directory, publisher, logger: silentLogger() }, { disableAfterMs: 0, intervalMs: 3_600_000 });
    const intake = { merchantId: merchant.id, endpointId: 'ep_m_gone_deleted', event: 'payout', references: ['PO-1'], body: '{}', webhookId: 'evt_gone', attempts: 2, deferrals: 0, postponements: 0, firstSeenAt: new Date(0).toISOString(), accepted: true } as IntakeEvent;
    operations.observe(intake, { kind: 'failed', reason: 'webhook-disabled', attempts: 2, error: 'webhook disabled', attempted: false }, new Date(1_000));
    expect(emitted.map((e) => [e.event.type, e.event.data.endpointId])).toEqual([['message.attempt.exhausted', 'ep_m_gone_deleted']]);
  });
});
