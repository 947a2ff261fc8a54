import { sampleEvent } from '../../libs/contracts/index.js';
import type { Merchant } from '../../libs/merchants/index.js';
import { startHarness, testMerchant, testSecret } from '../support/harness.js';
import { Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

const SCHEDULE = Array.from({ length: 200 }, () => 300);
const LEASE_MS = 4_000;

/**
 * An endpoint of two whose circuit is open, its payouts parked behind it; the operator narrows its
 * events to charges (the merchant: "no more payouts there"), a charge is parked behind them, and the
 * endpoint comes back. Each probe is the oldest parked wait: a payout, which can no longer be sent
 * there and goes to failed (event-not-subscribed). Seen failing: that end left the row open with its
 * next probe a WAIT_LEASE on, so the charge waited one lease per payout ahead of it (a payout batch
 * behind a dead endpoint: its charges failed circuit-open at their span's end, the endpoint long back).
 */
it("delivers an endpoint's parked charge soon after it is back, though payouts it no longer takes were parked ahead of it", async () => {
  let down = true;
  const receiver = await Receiver.start((_n, req) => (req.path.endsWith('/dead') && down ? 500 : 204));
  const base = testMerchant('m_narrowed', receiver.url);
  const dead = { id: 'ep_narrowed_dead', url: `${receiver.url}/dead`, enabled: true, secret: testSecret() };
  const alive = { id: 'ep_narrowed_alive', url: `${receiver.url}/alive`, enabled: true, secret: testSecret() };
  const merchant: Merchant = { ...base, endpoints: [dead, alive] };
  const harness = await startHarness({
    name: 'circuit-narrowed',
    merchants: [merchant],
    retryDelaysMs: SCHEDULE,
    waitLeaseMs: LEASE_MS,
    settings: { breakerThreshold: 2, breakerCooldownMs: 500, perEndpointConcurrency: 1 },
  });
  const at = (name: string) => receiver.requests.filter((r) => r.path.endsWith(`/${name}`));
  const parked = async (endpointId: string) =>
    Number((await harness.database.query<{ n: string }>('SELECT count(*) AS n FROM webhook_waits WHERE endpoint_id = $1 AND parked', [endpointId]))[0]!.n);
  try {
    const payouts: string[] = [];
    for (let i = 0; i < 12; i++) payouts.push((await harness.publisher.publish(sampleEvent('payout', merchant.id))).messageId);
    await waitFor("every payout parked behind the dead endpoint's open circuit", async () => (await parked(dead.id)) === 12, 20_000);
    const charge = (await harness.publisher.publish(sampleEvent('charge.completed', merchant.id))).messageId;
    await waitFor('the charge parked behind them', async () =>
      (await harness.database.query('SELECT 1 FROM webhook_waits WHERE webhook_id = $1 AND endpoint_id = $2 AND parked', [charge, dead.id])).length === 1, 10_000);
    // The operator narrows it to charges (the dispatcher reads its row again), and it is back.
    await harness.setMerchants([{ ...merchant, endpoints: [{ ...dead, events: ['charge.completed'] }, alive] }]);
    down = false;
    const from = Date.now();
    // Its probe due now, not after the cooldown its failed probes doubled (seconds, more on a loaded
    // machine): a probe and a hand-back; one lease per payout ahead of it (12 × 4 s) is what the defect took.
    await harness.database.query('UPDATE wait_circuits SET probe_at = now() WHERE endpoint_id = $1', [dead.id]);
    await waitFor('the charge delivered to the endpoint back', () => at('dead').some((r) => r.headers['webhook-id'] === charge && r.at >= from), 15_000);
    // The payouts were never sent there again: each failed as not subscribed.
    expect(at('dead').filter((r) => r.at >= from && payouts.includes(String(r.headers['webhook-id'])))).toEqual([]);
    await waitFor('every payout failed there', async () =>
      (await harness.database.query('SELECT 1 FROM failed_webhooks WHERE endpoint_id = $1 AND reason = $2', [dead.id, 'event-not-subscribed'])).length === 12, 10_000);
    // The other endpoint had every one, once.
    expect(at('alive').map((r) => String(r.headers['webhook-id'])).sort()).toEqual([...payouts, charge].sort());
  } finally {
    await harness.close();
    await receiver.close();
  }
}, 60_000);
