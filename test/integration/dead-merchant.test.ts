import { sampleEvent } from '../../libs/contracts/index.js';
import { startHarness, testMerchant } from '../support/harness.js';
import { failOnceThenSucceed, Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

/**
 * A dead merchant costs rows, not broker churn (issue 54): while its circuit is open, its waits
 * stay parked in their rows and only the probe is handed back to dispatch. Seen failing on the code
 * before wait_circuits (every wait went round dispatch every 300 ms, postponed and rewritten:
 * hundreds of hand-backs in the window) and on a pick that never parks.
 */
describe('waits of a merchant whose circuit is open', () => {
  it('are not handed back beyond the probe, while another merchant is served on time, and all go once it answers', async () => {
    let up = false;
    const dead = await Receiver.start(() => (up ? 204 : 500));
    const healthy = await Receiver.start(failOnceThenSucceed());
    const deadMerchant = testMerchant('m_dead', dead.url);
    const okMerchant = testMerchant('m_ok', healthy.url);
    // Steps shorter than the circuit's cooldown (a postponed wait was due again every 300 ms), a span
    // of 60 s (a parked wait is handed back when it ends, to fail: after this test).
    const harness = await startHarness({
      name: 'dead-merchant',
      merchants: [deadMerchant, okMerchant],
      retryDelaysMs: Array.from({ length: 200 }, () => 300),
      settings: { breakerThreshold: 2, breakerCooldownMs: 1_000, perEndpointConcurrency: 1 },
    });
    const handSum = async () => Number((await harness.database.query<{ n: string }>("SELECT coalesce(sum(hand), 0) AS n FROM webhook_waits WHERE merchant_id = 'm_dead'"))[0]!.n);
    try {
      const ids: string[] = [];
      for (let i = 0; i < 20; i++) ids.push((await harness.publisher.publish(sampleEvent('payout', deadMerchant.id))).messageId);
      // Two real attempts (one at a time) open its circuit; the others wait (postponed, or set
      // aside while the endpoint was busy: on a loaded machine a 500 can take longer than 100 ms).
      await waitFor('20 waits, the circuit open', async () => (await harness.waits.census(0)).waiting === 20 && harness.dispatcher.stats.circuitOpen >= 1 && dead.requests.length >= 2, 15_000);

      // A window of 3 s: the dead merchant's waits do not go round dispatch.
      const handed = harness.scheduler.stats.handed;
      const hands = await handSum();
      const attempts = dead.requests.length;
      const started = Date.now();
      await harness.publisher.publish(sampleEvent('payout', okMerchant.id));
      await healthy.waitForRequests(2, 10_000);
      await waitFor('the healthy retry delivered', () => harness.dispatcher.stats.delivered === 1, 10_000);
      await new Promise((resolve) => setTimeout(resolve, Math.max(0, 3_000 - (Date.now() - started))));
      // The probes at most (the in-memory cooldown is 1 s, then 2 s: two), each handed back once and
      // maybe postponed once, and the healthy merchant's retry.
      const probes = dead.requests.length - attempts;
      expect(probes).toBeLessThanOrEqual(3);
      expect(harness.scheduler.stats.handed - handed).toBeLessThanOrEqual(2 * probes + 4);
      expect((await handSum()) - hands).toBeLessThanOrEqual(4 * probes + 8);
      expect(await harness.test.messageCount(harness.names.dispatch)).toBeLessThanOrEqual(1);
      const parked = await harness.database.query<{ n: string }>("SELECT count(*) AS n FROM webhook_waits WHERE merchant_id = 'm_dead' AND parked");
      expect(Number(parked[0]!.n)).toBeGreaterThanOrEqual(19);

      // The merchant answers again: the next probe is delivered, closes the circuit, and every parked wait goes.
      const from = dead.requests.length;
      up = true;
      const delivered = () => new Set(dead.requests.slice(from).map((r) => String(r.headers['webhook-id'])).filter((id) => ids.includes(id)));
      await waitFor('every webhook delivered', () => delivered().size === 20 && harness.dispatcher.stats.delivered === 21, 25_000);
      expect(dead.requests.length - from).toBe(20);
      await waitFor('no wait left, no circuit row', async () => (await harness.waits.census(0)).waiting === 0
        && (await harness.database.query('SELECT 1 FROM wait_circuits')).length === 0, 10_000);
      expect(harness.dispatcher.stats.failed).toBe(0);
    } finally {
      await harness.close();
      await dead.close();
      await healthy.close();
    }
  });
});
