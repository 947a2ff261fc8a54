import { HEADERS, sampleEvent } from '../../libs/contracts/index.js';
import { endpointOf } from '../../apps/dispatcher/stages/endpoint-key.js';
import { startHarness, testMerchant } from '../support/harness.js';
import { Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

describe('slow and failing merchants', () => {
  it("does not delay a healthy merchant's webhooks while another merchant's endpoint hangs", async () => {
    const healthy = await Receiver.start();
    const hanging = await Receiver.start(() => 'hang');
    const good = testMerchant('m_good', healthy.url);
    const bad = testMerchant('m_hang', hanging.url);
    // Long enough that a healthy delivery on a loaded machine (964 ms seen in CI) stays under half of it.
    const timeoutMs = 3_000;
    const harness = await startHarness({
      name: 'isolation',
      merchants: [good, bad],
      retryDelaysMs: [5_000, 5_000],
      settings: { concurrency: 8, deliveryTimeoutMs: timeoutMs },
    });
    try {
      const sentAt = new Map<string, number>();
      // The most requests the hanging endpoint held at once, sampled through the run.
      let mostHeld = 0;
      const sampler = setInterval(() => (mostHeld = Math.max(mostHeld, hanging.held)), 5);
      // 10% of the traffic goes to the hanging merchant, spread through the run.
      for (let i = 0; i < 200; i++) {
        const merchant = i % 10 === 0 ? bad : good;
        const message = sampleEvent('charge.completed', merchant.id);
        sentAt.set(String(message.data.tnxRef), Date.now());
        await harness.publisher.publish(message);
      }
      await healthy.waitForRequests(180, 20_000);
      clearInterval(sampler);
      const latencies = healthy.requests.map((r) => r.at - sentAt.get(JSON.parse(r.body).data.tnxRef)!);
      if (process.env.REPORT_LATENCY) console.log(JSON.stringify({ max: Math.max(...latencies), p50: [...latencies].sort((a, b) => a - b)[Math.floor(latencies.length / 2)] }));
      // Blocked behind the hanging endpoint, healthy deliveries would wait a whole timeout.
      expect(Math.max(...latencies)).toBeLessThan(timeoutMs / 2);
      // The hanging endpoint never had more than its bound in flight: half of 8 (those that timed
      // out make room for the next, so count what it held at once, not what it received).
      expect(mostHeld).toBeGreaterThan(0);
      expect(mostHeld).toBeLessThanOrEqual(4);
      // Its deliveries beyond the bound are set aside once it has hung a threshold past its slow
      // threshold (200 ms): the healthy ones may all be through before that.
      await waitFor('the hanging endpoint\'s deliveries set aside', () => harness.dispatcher.stats.deferred > 0, 5_000);
    } finally {
      await harness.close();
      await Promise.all([healthy.close(), hanging.close()]);
    }
  });

  it('keeps DISPATCH_CONCURRENCY requests in flight across endpoints, and holds twice that many deliveries so the next goes out when one ends', async () => {
    let holding = true;
    let mostHeld = 0;
    const receiver = await Receiver.start(() => {
      if (!holding) return 204;
      mostHeld = Math.max(mostHeld, receiver.held + 1);
      return 'hang';
    });
    // Four merchants, four endpoints: each could take 2 (half of 4) requests, 8 in all, without the process's bound.
    const merchants = [0, 1, 2, 3].map((i) => testMerchant(`m_bound_${i}`, `${receiver.url}/m${i}`));
    const harness = await startHarness({ name: 'bound', merchants, settings: { concurrency: 4, deliveryTimeoutMs: 30_000 } });
    try {
      for (let round = 0; round < 3; round++) for (const m of merchants) await harness.publisher.publish(sampleEvent('payout', m.id));
      // The prefetch is 8: 4 requests held by the merchants, 4 deliveries waiting for a slot, 4 still in the queue.
      await waitFor('4 requests held and 4 deliveries waiting for a slot', () => receiver.held === 4 && harness.dispatcher.guards.waitingForRoom === 4, 10_000);
      expect(harness.dispatcher.guards.inFlight).toBe(4);
      expect((await harness.test.channel.checkQueue(harness.names.dispatch)).messageCount).toBe(4);
      holding = false;
      receiver.answerHeld(204);
      await waitFor('12 delivered', () => harness.dispatcher.stats.delivered === 12, 10_000);
      expect(mostHeld).toBe(4);
      // Waiting for the process's room is not a slow endpoint: nothing was set aside.
      expect(harness.dispatcher.stats.deferred).toBe(0);
    } finally {
      await harness.close();
      await receiver.close();
    }
  });

  it('opens the circuit after consecutive failures, postpones without spending attempts, and probes after the cooldown', async () => {
    // The third failure opens the row (the fourth request, the probe, opens it again), and the breaker
    // opens when the row's announcement reaches it; until then the wait, parked only for what is left
    // of its span (250 ms), would be handed back and attempted (a loaded machine announced 400 ms
    // late): at each, the pick pauses until the breaker has heard.
    let scheduling: Promise<void> | undefined;
    const failing = await Receiver.start((n) => {
      if (n === 2 || n === 3) scheduling = harness.scheduler.stop();
      return 500;
    });
    const merchant = testMerchant('m_breaker', failing.url);
    const harness = await startHarness({
      name: 'breaker',
      merchants: [merchant],
      retryDelaysMs: [50, 50, 50, 50, 50],
      settings: { breakerThreshold: 3, breakerCooldownMs: 1_500 },
    });
    const endpoint = endpointOf(merchant.id, merchant.endpoints[0]!.id, merchant.endpoints[0]!.url);
    try {
      await harness.publisher.publish(sampleEvent('payout', merchant.id));
      await waitFor('the circuit open in its row and in the breaker', () => scheduling !== undefined && harness.dispatcher.guards.openUntil(endpoint) > 0, 5_000);
      await scheduling;
      harness.scheduler.start();
      const [entry] = await harness.test.readStream(harness.names.failed, 1);
      // Three real attempts opened the circuit; the rest of the schedule's span passed postponed,
      // and the entry carries the last real error, not a made-up one.
      expect(failing.requests).toHaveLength(3);
      expect(entry!.properties.headers![HEADERS.attempts]).toBe(3);
      expect(entry!.properties.headers![HEADERS.failedReason]).toBe('circuit-open');
      expect(entry!.properties.headers![HEADERS.lastError]).toBe('HTTP 500');
      expect(entry!.properties.headers![HEADERS.lastStatus]).toBe(500);

      // After the cooldown one delivery probes the endpoint (the row's probe, or the first once the
      // row closed with nothing to probe with); it fails and the circuit opens again, for twice as long.
      const reopensAt = harness.dispatcher.guards.openUntil(endpoint);
      expect(reopensAt).toBeGreaterThan(0);
      // The breaker's times are on the monotonic clock.
      await waitFor('cooldown over', () => performance.now() > reopensAt, 5_000);
      // The probe's failure opens the row again: its wait is picked only once the breaker heard (as above).
      scheduling = undefined;
      const probedFrom = performance.now();
      await harness.publisher.publish(sampleEvent('payout', merchant.id));
      await waitFor('the circuit open again, its cooldown doubled', () => scheduling !== undefined && harness.dispatcher.guards.openUntil(endpoint) > probedFrom + 2_000, 5_000, 20);
      await scheduling;
      harness.scheduler.start();
      const entries = await harness.test.readStream(harness.names.failed, 2);
      expect(failing.requests).toHaveLength(4);
      expect(entries[1]!.properties.headers![HEADERS.attempts]).toBe(1);
    } finally {
      await harness.close();
      await failing.close();
    }
  });

  it('waits at least Retry-After on 429 and 503, within the schedule', async () => {
    const receiver = await Receiver.start((n) =>
      n === 0 ? { status: 503, headers: { 'retry-after': '1' } } : n === 1 ? { status: 429, headers: { 'retry-after': '3600' } } : 200,
    );
    const merchant = testMerchant('m_retry_after', receiver.url);
    const harness = await startHarness({ name: 'retryafter', merchants: [merchant], retryDelaysMs: [100, 1_200, 2_000] });
    try {
      await harness.publisher.publish(sampleEvent('refund.completed', merchant.id));
      const requests = await receiver.waitForRequests(3, 15_000);
      // 503 with Retry-After: 1 s skips the 100 ms tier and waits in the 1.2 s one.
      expect(requests[1]!.at - requests[0]!.at).toBeGreaterThanOrEqual(1_150);
      // 429 with an hour is bounded by the last tier (2 s), not honoured beyond the schedule.
      const second = requests[2]!.at - requests[1]!.at;
      expect(second).toBeGreaterThanOrEqual(1_950);
      expect(second).toBeLessThan(4_000);
      await waitFor('delivered', () => harness.dispatcher.stats.delivered === 1);
    } finally {
      await harness.close();
      await receiver.close();
    }
  });
});
