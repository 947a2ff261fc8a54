import type { CircuitRows } from '../../apps/dispatcher/circuit-rows.js';
import { endpointOf } from '../../apps/dispatcher/stages/endpoint-key.js';
import { sampleEvent } from '../../libs/contracts/index.js';
import { type Harness, startHarness, testMerchant } from '../support/harness.js';
import { otherDispatcher } from '../support/other-dispatcher.js';
import { Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

const SCHEDULE = Array.from({ length: 200 }, () => 300);

/** A second dispatcher beside the harness's, whose breakers follow the rows only once the test calls follow(). */
const secondDispatcher = (harness: Harness, userAgent: string, breakerCooldownMs: number) =>
  otherDispatcher(harness, { retryDelaysMs: SCHEDULE, userAgent, breakerThreshold: 2, breakerCooldownMs, perEndpointConcurrency: 1 });

/**
 * A circuit's row is the one copy of an endpoint's circuit that decides for its waits; each
 * dispatcher's breaker is its own. Two dispatchers saw the endpoint die; the second's breaker
 * cooldown is long (as after probes that failed: up to 10 minutes). The endpoint answers again,
 * the first dispatcher's breaker and the row close: the second's breaker closes with the row.
 * Seen failing with breakers that heard nothing of the row: the second postponed the waits the
 * close made due, opening the row again, and they stayed parked until its own cooldown ended
 * (all delivered 15.5 s after the endpoint came back, against 1.6 s with both cooldowns at 1 s).
 */
describe('two dispatchers whose breakers opened on a dead endpoint, one with a long cooldown', () => {
  it('deliver its parked waits once it answers the other: the long breaker closes with the row, not at its own cooldown', async () => {
    let up = false;
    const endpoint = await Receiver.start(() => (up ? 204 : 500));
    const merchant = testMerchant('m_two_breakers', endpoint.url);
    const harness = await startHarness({ name: 'circuit-closes', merchants: [merchant], retryDelaysMs: SCHEDULE, settings: { breakerThreshold: 2, breakerCooldownMs: 1_000, perEndpointConcurrency: 1 } });
    const other = secondDispatcher(harness, 'second', 20_000);
    const second = other.dispatcher;
    // As the program wires them (the harness's dispatcher too): each dispatcher's breakers follow the rows.
    const closes: CircuitRows[] = [];
    const url = endpointOf(merchant.id, merchant.endpoints[0]!.id, merchant.endpoints[0]!.url);
    let publishing = true;
    try {
      const ids: string[] = [];
      for (let i = 0; i < 40; i++) ids.push((await harness.publisher.publish(sampleEvent('payout', merchant.id))).messageId);
      // The first opens the row (its cooldown, 1 s); the second joins, its own cooldown 20 s (as after failed probes).
      await waitFor('the row written', async () => (await harness.database.query('SELECT 1 FROM wait_circuits')).length === 1, 20_000);
      closes.push(other.follow());
      await second.start();
      await waitFor('both breakers open, every webhook waiting', async () => harness.dispatcher.guards.openUntil(url) > 0 && second.guards.openUntil(url) > 0
        && (await harness.waits.census(0)).waiting === 40, 20_000);

      up = true;
      const from = Date.now();
      // New webhooks go on arriving: the first dispatcher's half-open probe is one of them.
      const load = (async () => {
        while (publishing) {
          await harness.publisher.publish(sampleEvent('payout', merchant.id));
          await new Promise((resolve) => setTimeout(resolve, 100));
        }
      })();
      const delivered = () => new Set(endpoint.requests.filter((r) => r.at >= from).map((r) => String(r.headers['webhook-id'])).filter((id) => ids.includes(id))).size;
      await waitFor('every parked webhook delivered', () => delivered() === 40, 30_000, 50);
      const tookMs = Date.now() - from;
      publishing = false;
      await load;
      // Its first dispatcher's cooldown (1 s, 2 s after a failed probe) and a few seconds' work; not the other's 20 s.
      expect(tookMs).toBeLessThan(10_000);
      expect(second.guards.openUntil(url)).toBe(0);
    } finally {
      publishing = false;
      for (const listener of closes) await listener.stop();
      await other.close();
      await harness.close();
      await endpoint.close();
    }
  });


  // Its listener's connection dropped while the row closed: the close's notification is lost to it.
  // Seen failing on breakers kept apart from the row: the second kept its own cooldown (20 s), its
  // postponements after the close opened the row again, and the parked waits stayed parked.
  it('deliver its parked waits once it answers the other, though the long breaker missed the close (its listener away): the row decides', async () => {
    let up = false;
    const endpoint = await Receiver.start(() => (up ? 204 : 500));
    const merchant = testMerchant('m_missed_close', endpoint.url);
    const harness = await startHarness({ name: 'circuit-closes-missed', merchants: [merchant], retryDelaysMs: SCHEDULE, settings: { breakerThreshold: 2, breakerCooldownMs: 1_000, perEndpointConcurrency: 1 } });
    const other = secondDispatcher(harness, 'second', 20_000);
    const second = other.dispatcher;
    let away: CircuitRows | undefined;
    let back: CircuitRows | undefined;
    const url = endpointOf(merchant.id, merchant.endpoints[0]!.id, merchant.endpoints[0]!.url);
    let publishing = true;
    try {
      const ids: string[] = [];
      for (let i = 0; i < 40; i++) ids.push((await harness.publisher.publish(sampleEvent('payout', merchant.id))).messageId);
      // The first opens the row (its cooldown, 1 s); the second joins, its own cooldown 20 s (as after failed probes).
      await waitFor('the row written', async () => (await harness.database.query('SELECT 1 FROM wait_circuits')).length === 1, 20_000);
      away = other.follow();
      await second.start();
      await waitFor('both breakers open, every webhook waiting', async () => harness.dispatcher.guards.openUntil(url) > 0 && second.guards.openUntil(url) > 0
        && (await harness.waits.census(0)).waiting === 40, 20_000);
      // The second's listener goes away: what is announced meanwhile never reaches it.
      await away!.stop();
      away = undefined;

      up = true;
      const from = Date.now();
      const load = (async () => {
        while (publishing) {
          await harness.publisher.publish(sampleEvent('payout', merchant.id));
          await new Promise((resolve) => setTimeout(resolve, 100));
        }
      })();
      await waitFor("the first dispatcher's breaker closed with the row", () => harness.dispatcher.guards.openUntil(url) === 0, 15_000, 20);
      // It listens again (a connection re-made within 5 s): the close it missed is not announced again.
      back = other.follow();
      const delivered = () => new Set(endpoint.requests.filter((r) => r.at >= from).map((r) => String(r.headers['webhook-id'])).filter((id) => ids.includes(id))).size;
      await waitFor('every parked webhook delivered', () => delivered() === 40, 30_000, 50).catch(async (err: Error) => {
        const circuits = await harness.database.query('SELECT probe_at, closing FROM wait_circuits');
        throw new Error(`${err.message}: ${delivered()} of 40 after ${Date.now() - from} ms; circuits ${JSON.stringify(circuits)}; second's breaker open until ${second.guards.openUntil(url) - performance.now()} ms from now`);
      });
      const tookMs = Date.now() - from;
      publishing = false;
      await load;
      expect(tookMs).toBeLessThan(10_000);
      expect(second.guards.openUntil(url)).toBe(0);
    } finally {
      publishing = false;
      await away?.stop();
      await back?.stop();
      await other.close();
      await harness.close();
      await endpoint.close();
    }
  });
});

/**
 * The row is the circuit for every dispatcher, not only for those whose own attempts failed. Seen
 * failing with a breaker of each dispatcher's own: one started after the endpoint died (no failure
 * of its own) sent its new webhooks to it while the row held the others parked, and its successes
 * closed nothing (its breaker was never open).
 */
describe('a dispatcher that never saw the endpoint fail', () => {
  it("follows its circuit's row: postpones while it is open, and the row's probe closes it there too", async () => {
    let up = false;
    const endpoint = await Receiver.start(() => (up ? 204 : 500));
    const merchant = testMerchant('m_never_saw', endpoint.url);
    const harness = await startHarness({ name: 'circuit-closes-fresh', merchants: [merchant], retryDelaysMs: SCHEDULE, settings: { breakerThreshold: 2, breakerCooldownMs: 60_000, perEndpointConcurrency: 1 } });
    const other = secondDispatcher(harness, 'fresh', 60_000);
    const fresh = other.dispatcher;
    const closes = [other.follow()];
    const url = endpointOf(merchant.id, merchant.endpoints[0]!.id, merchant.endpoints[0]!.url);
    try {
      const ids: string[] = [];
      for (let i = 0; i < 10; i++) ids.push((await harness.publisher.publish(sampleEvent('payout', merchant.id))).messageId);
      await waitFor('the first breaker open, the row written, every webhook parked', async () => harness.dispatcher.guards.openUntil(url) > 0
        && (await harness.database.query('SELECT 1 FROM wait_circuits WHERE NOT closing')).length === 1
        && Number((await harness.database.query<{ n: string }>('SELECT count(*) AS n FROM webhook_waits WHERE parked'))[0]!.n) >= 9, 20_000);
      // The first dispatcher goes; one that never sent to the endpoint takes its place, and it is back up.
      await harness.dispatcher.stop();
      await fresh.start();
      up = true;
      const sent = endpoint.requests.length;
      for (let i = 0; i < 5; i++) ids.push((await harness.publisher.publish(sampleEvent('payout', merchant.id))).messageId);
      await waitFor('its new webhooks settled', () => fresh.stats.circuitOpen + fresh.stats.delivered >= 5, 10_000, 20);
      // The row is open: nothing goes to the endpoint but the row's probe.
      expect({ sent: endpoint.requests.length - sent, postponed: fresh.stats.circuitOpen }).toEqual({ sent: 0, postponed: 5 });
      expect(fresh.guards.openUntil(url)).toBeGreaterThan(0);
      // The row's probe (made due now) is delivered: the row closes, every wait goes, and the breaker closes with it.
      await harness.database.query('UPDATE wait_circuits SET probe_at = now()');
      await waitFor('every webhook delivered', () => new Set(endpoint.requests.map((r) => String(r.headers['webhook-id'])).filter((id) => ids.includes(id))).size === 15, 15_000, 50);
      await waitFor("the fresh dispatcher's breaker closed", () => fresh.guards.openUntil(url) === 0, 5_000, 20);
    } finally {
      for (const listener of closes) await listener.stop();
      await other.close();
      await harness.close();
      await endpoint.close();
    }
  });
});

/**
 * A row closed because its webhook can no longer be sent to is no answer of its URL, and a breaker
 * is its merchant's (endpointOf): the merchant that turned its endpoint off has its breaker closed
 * with its row (as its row says; one failure would open it again), the other merchant's at that URL
 * stays open with its own row.
 */
describe("two merchants' endpoints at one dead URL", () => {
  it("closes only the breaker of the merchant that turned its endpoint off, as its row closes unanswered; the other's stays open with its row", async () => {
    const endpoint = await Receiver.start(() => 500);
    const off = testMerchant('m_shared_off', endpoint.url);
    const on = testMerchant('m_shared_on', endpoint.url);
    const harness = await startHarness({ name: 'circuit-closes-off', merchants: [off, on], retryDelaysMs: SCHEDULE, settings: { breakerThreshold: 2, breakerCooldownMs: 60_000, perEndpointConcurrency: 1 } });
    const offUrl = endpointOf(off.id, off.endpoints[0]!.id, endpoint.url);
    const onUrl = endpointOf(on.id, on.endpoints[0]!.id, endpoint.url);
    try {
      for (const merchant of [off, on, off, on]) await harness.publisher.publish(sampleEvent('payout', merchant.id));
      await waitFor('both breakers open, both rows written', async () => harness.dispatcher.guards.openUntil(offUrl) > 0 && harness.dispatcher.guards.openUntil(onUrl) > 0
        && (await harness.database.query('SELECT 1 FROM wait_circuits WHERE NOT closing')).length === 2, 20_000);
      // Its merchant turns that endpoint off; the row's probe comes.
      await harness.setMerchants([{ ...off, endpoints: [{ ...off.endpoints[0]!, enabled: false, disabledReason: 'manual' }] }, on]);
      await harness.database.query('UPDATE wait_circuits SET probe_at = now() WHERE merchant_id = $1', [off.id]);
      await waitFor("the off merchant's waits ended, its row gone, its breaker closed", async () => (await harness.database.query('SELECT 1 FROM wait_circuits WHERE merchant_id = $1', [off.id])).length === 0
        && (await harness.database.query('SELECT 1 FROM webhook_waits WHERE merchant_id = $1', [off.id])).length === 0 && harness.dispatcher.guards.openUntil(offUrl) === 0, 20_000);
      // The URL never answered: the other merchant's webhooks there are still postponed, not sent to it again.
      expect(harness.dispatcher.guards.openUntil(onUrl)).toBeGreaterThan(0);
      expect(await harness.database.query('SELECT merchant_id FROM wait_circuits WHERE NOT closing')).toEqual([{ merchant_id: on.id }]);
    } finally {
      await harness.close();
      await endpoint.close();
    }
  });
});

/**
 * A webhook postponed behind an open circuit waits for the circuit, not for a time: its delay (the
 * first step of the schedule past the cooldown: 20 s here) only had to outlast the cooldown. Seen
 * failing with the unpark making it due at that delay: the endpoint fixed, the probe delivered at
 * the cooldown's end (1 s), the postponed webhooks still waited their 20 s.
 */
describe('webhooks postponed behind an open circuit whose endpoint is fixed', () => {
  it('go once the probe closes it, within the cooldown and a few seconds, not at their postponement delay', async () => {
    let up = false;
    const endpoint = await Receiver.start(() => (up ? 204 : 500));
    const merchant = testMerchant('m_postponed_fixed', endpoint.url);
    const harness = await startHarness({ name: 'circuit-closes-postponed', merchants: [merchant], retryDelaysMs: [200, 20_000, 20_000, 20_000], settings: { breakerThreshold: 2, breakerCooldownMs: 1_000, perEndpointConcurrency: 1 } });
    const url = endpointOf(merchant.id, merchant.endpoints[0]!.id, merchant.endpoints[0]!.url);
    try {
      for (let i = 0; i < 2; i++) await harness.publisher.publish(sampleEvent('payout', merchant.id));
      await waitFor('its breaker open with its row', () => harness.dispatcher.guards.openUntil(url) > 0, 20_000);
      const ids: string[] = [];
      for (let i = 0; i < 10; i++) ids.push((await harness.publisher.publish(sampleEvent('payout', merchant.id))).messageId);
      await waitFor('the new webhooks postponed', () => harness.dispatcher.stats.circuitOpen >= 10, 10_000);
      // Fixed: the next probe (a second after the row opened, or after a failed probe two) closes it.
      up = true;
      const from = Date.now();
      const delivered = () => new Set(endpoint.requests.filter((r) => r.at >= from).map((r) => String(r.headers['webhook-id'])).filter((id) => ids.includes(id))).size;
      await waitFor('every postponed webhook delivered', () => delivered() === 10, 10_000, 50).catch((err: Error) => {
        throw new Error(`${err.message}: ${delivered()} of 10 after ${Date.now() - from} ms`);
      });
    } finally {
      await harness.close();
      await endpoint.close();
    }
  });
});
