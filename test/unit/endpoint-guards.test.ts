import { jest } from '@jest/globals';
import { EndpointGuards } from '../../apps/dispatcher/stages/endpoint-guards.js';
import { endpointOf } from '../../apps/dispatcher/stages/endpoint-key.js';

const options = { maxInFlight: 2, failureThreshold: 2, cooldownMs: 30_000, maxCooldownMs: 600_000, maxEndpoints: 1_000 };

/**
 * Each URL here is its own merchant's, keyed as admission keys it (endpointOf: merchant, endpoint
 * and URL; an endpoint's URLs share its circuit and bound, another merchant's at the same URL share
 * nothing). Each merchant has one endpoint, `ep_1`, unless a test names another.
 */
const merchantOf = (url: string) => (url === 'https://down.example.com/hook' ? 'm_1' : `m_${new URL(url).hostname}`);
const keyOf = (url: string, merchantId = merchantOf(url), endpointId = 'ep_1') => endpointOf(merchantId, endpointId, url);

/** One attempt to the URL; returns the cooldown its failure opens the circuit's row for (0: none). */
async function deliverOnce(guards: EndpointGuards, url: string, result: 'succeeded' | 'failed' = 'succeeded'): Promise<number> {
  const admission = await guards.acquire(keyOf(url), { merchantId: merchantOf(url), canDefer: true, force: false }, () => false);
  if (admission?.kind !== 'send') throw new Error(`expected to send to ${url}, got ${admission?.kind}`);
  return admission.release(result, result === 'failed' ? 'HTTP 500' : undefined);
}

/** What CircuitRows does when the row a failure opened is announced. */
function rowOpens(guards: EndpointGuards, key: string, cooldownMs: number) {
  guards.openCircuit(key, cooldownMs, cooldownMs);
}

describe('the per-endpoint breaker map', () => {
  it('keeps bounded state after 100,000 distinct URLs seen once, and keeps the open circuits', async () => {
    const clock = 1_000_000;
    const guards = new EndpointGuards({ ...options, now: () => clock });
    const broken = 'https://down.example.com/hook';
    expect(await deliverOnce(guards, broken, 'failed')).toBe(0);
    rowOpens(guards, keyOf(broken), await deliverOnce(guards, broken, 'failed'));
    expect(guards.openUntil(keyOf(broken))).toBe(clock + options.cooldownMs);

    for (let i = 0; i < 100_000; i++) await deliverOnce(guards, `https://shop-${i}.example.com/hooks/${i}`);
    expect(guards.size).toBeLessThanOrEqual(options.maxEndpoints);
    // The circuit of the endpoint that is down stays open: pruning forgets only idle closed ones.
    expect(guards.openUntil(keyOf(broken))).toBeGreaterThan(clock);
    expect(guards.openEndpoints()).toEqual(['https://down.example.com (m_1)']);
  });

  it("leaves the breaker as it was when a slot is given back unsent ('unused': its endpoint turned off while it waited)", async () => {
    const guards = new EndpointGuards(options);
    const url = 'https://flaky.example.com/hook';
    await deliverOnce(guards, url, 'failed');
    const admission = await guards.acquire(keyOf(url), { merchantId: merchantOf(url), canDefer: true, force: false }, () => false);
    if (admission?.kind !== 'send') throw new Error('expected a slot');
    // Counted as an answer, it would reset the failures in a row: the next failure would not open the circuit.
    expect(admission.release('unused')).toBe(0);
    expect(guards.inFlight).toBe(0);
    expect(await deliverOnce(guards, url, 'failed')).toBe(options.cooldownMs);
  });

  it("never opens or closes a circuit on its own: its failures open the row, which opens it; an answer through it closes the row, which closes it", async () => {
    const clock = 1_000_000;
    const guards = new EndpointGuards({ ...options, now: () => clock });
    const url = 'https://dead.example.com/hook';
    await deliverOnce(guards, url, 'failed');
    expect(await deliverOnce(guards, url, 'failed')).toBe(options.cooldownMs);
    // Not open until its row says so: a failure's write, then the row's announcement.
    expect(guards.openUntil(keyOf(url))).toBe(0);
    rowOpens(guards, keyOf(url), options.cooldownMs);
    expect(await guards.acquire(keyOf(url), { merchantId: merchantOf(url), canDefer: true, force: false }, () => false)).toMatchObject({ kind: 'open', failures: 2, retryInMs: options.cooldownMs });
    // Its probe time passes: still open, until the row's probe (or the row closing) says otherwise.
    const later = new EndpointGuards({ ...options, now: () => clock + 10 * options.cooldownMs });
    later.openCircuit(keyOf(url), options.cooldownMs, -1);
    expect(await later.acquire(keyOf(url), { merchantId: merchantOf(url), canDefer: true, force: false }, () => false)).toMatchObject({ kind: 'open', retryInMs: 0 });
    // The row's probe goes through; its failure doubles the row's cooldown, and the breaker is as it was.
    const probe = await guards.acquire(keyOf(url), { merchantId: merchantOf(url), canDefer: true, force: true, probe: true }, () => false);
    if (probe?.kind !== 'send') throw new Error(`expected the probe to go, got ${probe?.kind}`);
    expect(probe.release('failed', 'HTTP 500')).toBe(2 * options.cooldownMs);
    expect(guards.openUntil(keyOf(url))).toBe(clock + options.cooldownMs);
    // Closed by its row only; closed unanswered (no wait left to probe with), one failure opens it
    // again, as a failed probe (the row's cooldown, as announced, doubled).
    rowOpens(guards, keyOf(url), 2 * options.cooldownMs);
    guards.closeCircuit(keyOf(url), false);
    expect(guards.openUntil(keyOf(url))).toBe(0);
    expect(await deliverOnce(guards, url, 'failed')).toBe(4 * options.cooldownMs);
    guards.closeCircuit(keyOf(url), true);
    expect(await deliverOnce(guards, url, 'failed')).toBe(0);
  });

  it('says when an answer closed the open circuit (its row in PostgreSQL closes too), and only then', async () => {
    let clock = 1_000_000;
    const guards = new EndpointGuards({ ...options, now: () => clock });
    const url = 'https://revived.example.com/hook';
    const send = async (probe = false) => {
      const admission = await guards.acquire(keyOf(url), { merchantId: merchantOf(url), canDefer: true, force: probe, probe }, () => false);
      if (admission?.kind !== 'send') throw new Error(`expected a slot, got ${admission?.kind}`);
      return admission;
    };
    const closed = await send();
    closed.release('succeeded');
    expect(closed.closedCircuit).toBeUndefined();
    for (const result of ['failed', 'failed'] as const) (await send()).release(result, 'HTTP 500');
    rowOpens(guards, keyOf(url), options.cooldownMs);
    clock += options.cooldownMs;
    // The row's probe answers (a 4xx is an answer too): it closes the row, and the row the breaker.
    const probe = await send(true);
    probe.release('rejected');
    expect(probe.closedCircuit).toBe(true);
    expect(guards.openUntil(keyOf(url))).toBeGreaterThan(0);
    guards.closeCircuit(keyOf(url), true);
    expect(guards.openUntil(keyOf(url))).toBe(0);
  });

  it('never forgets an open circuit, however many are open past its bound: its row says nothing more until it closes', async () => {
    const clock = 1_000_000;
    const guards = new EndpointGuards({ ...options, maxEndpoints: 10, now: () => clock });
    const dead = Array.from({ length: 12 }, (_, i) => `https://dead-${i}.example.com/h`);
    for (const url of dead) rowOpens(guards, keyOf(url), options.cooldownMs);
    for (let i = 0; i < 100; i++) await deliverOnce(guards, `https://idle-${i}.example.com/h`);
    expect(guards.size).toBeLessThanOrEqual(dead.length + 10);
    for (const url of dead) {
      const admission = await guards.acquire(keyOf(url), { merchantId: merchantOf(url), canDefer: true, force: false }, () => false);
      expect({ url, kind: admission?.kind }).toEqual({ url, kind: 'open' });
    }
  });

  it('never forgets an endpoint with deliveries in flight', async () => {
    const guards = new EndpointGuards({ ...options, maxEndpoints: 10 });
    const busy = await guards.acquire('https://busy.example.com/h', { merchantId: 'm_1', canDefer: true, force: false }, () => false);
    for (let i = 0; i < 100; i++) await deliverOnce(guards, `https://idle-${i}.example.com/h`);
    expect(guards.size).toBeLessThanOrEqual(10);
    // Still tracked: its two slots are counted, so a third delivery has to wait or be set aside.
    await guards.acquire('https://busy.example.com/h', { merchantId: 'm_1', canDefer: true, force: false }, () => false);
    const third = guards.acquire('https://busy.example.com/h', { merchantId: 'm_1', canDefer: true, force: false }, () => false);
    const outcome = await Promise.race([third, new Promise((resolve) => setTimeout(() => resolve('waiting'), 50))]);
    expect(outcome === 'waiting' || (outcome as { kind: string }).kind === 'defer').toBe(true);
    if (busy?.kind === 'send') busy.release('succeeded');
    guards.wakeAll();
  });
});

describe('the bound on requests in flight to all endpoints', () => {
  const send = (url: string) => ({ merchantId: merchantOf(url), canDefer: true, force: false });
  const acquire = (guards: EndpointGuards, url: string) => guards.acquire(url, send(url), () => false);
  async function sending(guards: EndpointGuards, url: string) {
    const admission = await acquire(guards, url);
    if (admission?.kind !== 'send') throw new Error(`expected to send to ${url}, got ${admission?.kind}`);
    return admission;
  }

  it('makes a delivery whose endpoint has room wait while every slot is taken, never setting it aside, and hands it the next slot freed anywhere', async () => {
    const clock = { t: 0 };
    const guards = new EndpointGuards({ ...options, maxTotalInFlight: 3, now: () => clock.t });
    const a1 = await sending(guards, 'https://a.example.com/h');
    await sending(guards, 'https://a.example.com/h');
    await sending(guards, 'https://b.example.com/h');
    let admitted: Awaited<ReturnType<EndpointGuards['acquire']>> | 'waiting' = 'waiting';
    const c = acquire(guards, 'https://c.example.com/h').then((a) => (admitted = a));
    await Promise.resolve();
    clock.t = 10_000; // every request in flight is long past slow: still not a reason to set c aside
    await new Promise((resolve) => setImmediate(resolve));
    expect(admitted).toBe('waiting');
    expect(guards.inFlight).toBe(3);
    expect(guards.waitingForRoom).toBe(1);

    a1.release('succeeded');
    await c;
    expect(admitted).toMatchObject({ kind: 'send' });
    expect(guards.inFlight).toBe(3);
    expect(guards.waitingForRoom).toBe(0);
  });

  it("gives a freed slot to the delivery waiting longest: here the endpoint's own waiter, then the one waiting for the process", async () => {
    const guards = new EndpointGuards({ ...options, maxTotalInFlight: 2 });
    const a1 = await sending(guards, 'https://a.example.com/h');
    const a2 = await sending(guards, 'https://a.example.com/h');
    const order: string[] = [];
    const a3 = acquire(guards, 'https://a.example.com/h').then((x) => (order.push('a3'), x));
    const b1 = acquire(guards, 'https://b.example.com/h').then((x) => (order.push('b1'), x));
    await new Promise((resolve) => setImmediate(resolve));
    expect(order).toEqual([]);
    a1.release('succeeded');
    const third = await a3;
    expect(order).toEqual(['a3']);
    a2.release('succeeded');
    await b1;
    expect(order).toEqual(['a3', 'b1']);
    expect(guards.inFlight).toBe(2);
    if (third?.kind === 'send') third.release('succeeded');
  });

  it("gives a freed slot to a delivery whose endpoint's last answer did not fail before an older one whose did", async () => {
    // A merchant's twenty hanging endpoints are twenty shares: by age alone their deliveries, queued
    // first, took every slot until their circuits opened, and another merchant's waited behind them.
    const guards = new EndpointGuards({ ...options, maxTotalInFlight: 1 });
    (await sending(guards, 'https://a.example.com/h')).release('failed', 'timeout');
    const busy = await sending(guards, 'https://c.example.com/h');
    const order: string[] = [];
    const a = acquire(guards, 'https://a.example.com/h').then((x) => (order.push('a'), x));
    const b = acquire(guards, 'https://b.example.com/h').then((x) => (order.push('b'), x));
    await new Promise((resolve) => setImmediate(resolve));
    busy.release('succeeded');
    const first = await Promise.race([a, b]);
    expect(order).toEqual(['b']);
    if (first?.kind === 'send') first.release('succeeded');
    const second = await a;
    expect(order).toEqual(['b', 'a']);
    if (second?.kind === 'send') second.release('succeeded');
  });

  it("bounds another merchant's wait while two endpoints with endless demand hold every slot: a freed slot goes to the oldest waiting", async () => {
    // Each endpoint's share is half the process's slots: two busy ones take all of them. Their
    // requests never count as slow (the clock stands still), so their lines wait rather than defer.
    const guards = new EndpointGuards({ ...options, maxInFlight: 2, maxTotalInFlight: 4, now: () => 0 });
    const slow = ['https://slow-a.example.com/h', 'https://slow-b.example.com/h'];
    const inFlight: Record<string, Array<{ release(result: 'succeeded'): number }>> = { [slow[0]!]: [], [slow[1]!]: [] };
    // Endless demand: each endpoint always has deliveries waiting, one more arriving as each is sent.
    let stopped = false;
    const demand = (url: string): void => {
      void guards.acquire(url, send(url), () => stopped).then((admission) => {
        if (stopped) return;
        if (admission?.kind !== 'send') throw new Error(`expected to send to ${url}, got ${admission?.kind}`);
        inFlight[url]!.push(admission);
        demand(url);
      });
    };
    for (const url of slow) for (let i = 0; i < 4; i++) demand(url);
    await new Promise((resolve) => setImmediate(resolve));
    expect(guards.inFlight).toBe(4);
    let shop: Awaited<ReturnType<EndpointGuards['acquire']>> | 'waiting' = 'waiting';
    void guards.acquire('https://shop.example.com/h', send('https://shop.example.com/h'), () => stopped).then((a) => (shop = a));
    await new Promise((resolve) => setImmediate(resolve));
    expect(guards.waitingForRoom).toBe(1);
    // The slow endpoints answer in turn. Waiting behind only the eight that came before it (their
    // two lines of four), the shop's delivery is sent by the ninth answer; each freed slot given to
    // its own endpoint's line first, it was still waiting after fifty.
    let answers = 0;
    try {
      for (; shop === 'waiting' && answers < 50; answers++) {
        inFlight[slow[answers % 2]!]!.shift()!.release('succeeded');
        await new Promise((resolve) => setImmediate(resolve));
      }
      expect(shop).toMatchObject({ kind: 'send' });
      expect(answers).toBeLessThanOrEqual(9);
    } finally {
      stopped = true;
      guards.wakeAll();
    }
  });

  it("sets aside past half an endpoint's share waiting when its latency would not clear the line in time, counting those waiting for the process's room", async () => {
    const clock = { t: 0 };
    const guards = new EndpointGuards({ ...options, maxInFlight: 4, maxTotalInFlight: 8, now: () => clock.t });
    const url = 'https://second.example.com/h';
    const learnt = await sending(guards, url);
    clock.t = 2_000; // its usual latency: two seconds (never slow against it while the clock stands)
    learnt.release('succeeded');
    const kinds = (admissions: Array<Awaited<ReturnType<EndpointGuards['acquire']>> | 'waiting'>) => admissions.map((a) => (a === 'waiting' ? a : a?.kind));
    const admit = (target: string) => {
      let admission: Awaited<ReturnType<EndpointGuards['acquire']>> | 'waiting' = 'waiting';
      const done = acquire(guards, target).then((a) => (admission = a));
      return { done, get admission() { return admission; } };
    };
    // The process full (four to another endpoint, one to a third, three to this one): this one has room, the process none.
    for (let i = 0; i < 4; i++) await sending(guards, 'https://other.example.com/h');
    await sending(guards, 'https://third.example.com/h');
    for (let i = 0; i < 3; i++) await sending(guards, url);
    const line = [admit(url), admit(url), admit(url)];
    await new Promise((resolve) => setImmediate(resolve));
    // Two wait for the process's room; a third would make a line of three at two seconds each per
    // four slots (1.5 s): set aside. Never set aside there, such lines filled the prefetch.
    expect(kinds(line.map((l) => l.admission))).toEqual(['waiting', 'waiting', 'defer']);
    expect(guards.waitingForRoom).toBe(2);
    guards.wakeAll();
  });

  it('counts a probe of an open circuit against the bound, and hands back waiters on stop', async () => {
    const clock = { t: 0 };
    const guards = new EndpointGuards({ ...options, failureThreshold: 1, cooldownMs: 100, maxTotalInFlight: 1, now: () => clock.t });
    const failed = await sending(guards, 'https://down.example.com/h');
    rowOpens(guards, 'https://down.example.com/h', failed.release('failed', 'HTTP 500'));
    clock.t = 1_000; // the row's probe is due
    const held = await sending(guards, 'https://up.example.com/h');
    let stopped = false;
    const probe = guards.acquire('https://down.example.com/h', { ...send('https://down.example.com/h'), force: true, probe: true }, () => stopped);
    await new Promise((resolve) => setImmediate(resolve));
    expect(guards.waitingForRoom).toBe(1);
    stopped = true;
    guards.wakeAll();
    expect(await probe).toBeUndefined();
    held.release('succeeded');
    expect(guards.inFlight).toBe(0);
  });
});

describe("a merchant's share across its URLs", () => {
  const request = (merchantId: string, canDefer = false) => ({ merchantId, canDefer, force: false });
  const tick = () => new Promise((resolve) => setImmediate(resolve));

  it('bounds the requests in flight for one merchant across its URLs, so a URL change does not add a share, and leaves other merchants their room', async () => {
    const clock = { t: 0 };
    const guards = new EndpointGuards({ ...options, maxPerMerchant: 2, maxTotalInFlight: 4, now: () => clock.t });
    const first = await guards.acquire('https://tarpit.example/a', request('m_hostile'), () => false);
    await guards.acquire('https://tarpit.example/a', request('m_hostile'), () => false);
    // The merchant moves to another URL: that endpoint has room, the merchant has none.
    let moved: Awaited<ReturnType<EndpointGuards['acquire']>> | 'waiting' = 'waiting';
    const next = guards.acquire('https://tarpit.example/b', request('m_hostile'), () => false).then((a) => (moved = a));
    await tick();
    expect(moved).toBe('waiting');
    expect(guards.merchantInFlight('m_hostile')).toBe(2);
    // Another merchant still has the rest of the process's slots.
    expect(await guards.acquire('https://shop.example/h', request('m_other'), () => false)).toMatchObject({ kind: 'send' });
    expect(await guards.acquire('https://shop.example/h', request('m_other'), () => false)).toMatchObject({ kind: 'send' });
    // Once slow, the merchant's next delivery on its new URL is set aside rather than held.
    clock.t = 10_000;
    expect(await guards.acquire('https://tarpit.example/b', request('m_hostile', true), () => false)).toEqual({ kind: 'defer' });
    // One of its requests ends: the waiting one takes the slot.
    if (first?.kind === 'send') first.release('succeeded');
    await next;
    expect(moved).toMatchObject({ kind: 'send' });
    expect(guards.merchantInFlight('m_hostile')).toBe(2);
  });

  it("starts a merchant's new URL with the circuit its old URL opened, but never opens the circuit of a URL another merchant uses", async () => {
    const clock = { t: 0 };
    const guards = new EndpointGuards({ ...options, now: () => clock.t });
    const fail = async (url: string, merchantId: string) => {
      const admission = await guards.acquire(keyOf(url, merchantId), request(merchantId), () => false);
      if (admission?.kind !== 'send') throw new Error(`expected to send, got ${admission?.kind}`);
      return admission.release('failed', 'HTTP 500');
    };
    await fail('https://dead.example/a', 'm_1');
    rowOpens(guards, keyOf('https://dead.example/a', 'm_1'), await fail('https://dead.example/a', 'm_1'));
    expect(await guards.acquire(keyOf('https://dead.example/a', 'm_1'), request('m_1'), () => false)).toMatchObject({ kind: 'open', failures: 2 });
    // A URL change does not close the circuit (its row is the endpoint's): the new URL is postponed as the old one was.
    expect(await guards.acquire(keyOf('https://fresh.example/b', 'm_1'), request('m_1'), () => false)).toMatchObject({ kind: 'open', failures: 2, lastError: 'HTTP 500' });
    expect(guards.openUntil(keyOf('https://fresh.example/b', 'm_1'))).toBe(guards.openUntil(keyOf('https://dead.example/a', 'm_1')));
    // Pointing at another merchant's URL takes its own circuit there, never that merchant's.
    await deliverOnce(guards, 'https://victim.example/h');
    expect(await guards.acquire(keyOf('https://victim.example/h', 'm_1'), request('m_1'), () => false)).toMatchObject({ kind: 'open' });
    expect(guards.openUntil(keyOf('https://victim.example/h'))).toBe(0);
    expect(await guards.acquire(keyOf('https://victim.example/h'), request(merchantOf('https://victim.example/h')), () => false)).toMatchObject({ kind: 'send' });
  });
});

describe("an endpoint's circuit across URLs", () => {
  const request = (merchantId: string, endpointId: string) => ({ merchantId, endpointId, canDefer: false, force: false });

  it('closes at every URL the endpoint had when its row closes, and holds no other endpoint given a URL it left', async () => {
    const guards = new EndpointGuards({ ...options, now: () => 0 });
    const [one, two] = [keyOf('https://one.example/h', 'm_1', 'ep_a'), keyOf('https://two.example/h', 'm_1', 'ep_a')];
    const sent = await guards.acquire(one, request('m_1', 'ep_a'), () => false);
    if (sent?.kind !== 'send') throw new Error(`expected to send, got ${sent?.kind}`);
    sent.release('failed', 'HTTP 500');
    rowOpens(guards, one, 30_000);
    // Moved while open: the new URL is postponed too (the row is the endpoint's).
    expect(await guards.acquire(two, request('m_1', 'ep_a'), () => false)).toMatchObject({ kind: 'open' });
    // The row closes, announced under the URL the endpoint has now: its old URL closes with it.
    guards.closeCircuit(two, true);
    expect(guards.openUntil(one)).toBe(0);
    expect(await guards.acquire(one, request('m_1', 'ep_a'), () => false)).toMatchObject({ kind: 'send' });
    // Another endpoint of the merchant at a URL whose endpoint's row is open has a circuit of its own.
    const three = keyOf('https://three.example/h', 'm_1', 'ep_a');
    rowOpens(guards, three, 30_000);
    expect(await guards.acquire(keyOf('https://three.example/h', 'm_1', 'ep_b'), request('m_1', 'ep_b'), () => false)).toMatchObject({ kind: 'send' });
  });

  it('closes at the URLs remembered now, after one was forgotten and seen again', async () => {
    const guards = new EndpointGuards({ ...options, maxEndpoints: 10, now: () => 0 });
    const [one, two, other] = [keyOf('https://one.example/h', 'm_1', 'ep_a'), keyOf('https://two.example/h', 'm_1', 'ep_a'), keyOf('https://one.example/h', 'm_1', 'ep_b')];
    const sent = await guards.acquire(two, request('m_1', 'ep_a'), () => false);
    if (sent?.kind !== 'send') throw new Error(`expected to send, got ${sent?.kind}`);
    sent.release('succeeded');
    for (const key of [one, other]) rowOpens(guards, key, 30_000);
    // Idle and closed, `two` is forgotten; the open ones are kept.
    for (let i = 0; i < 20; i++) await deliverOnce(guards, `https://idle-${i}.example/h`);
    guards.closeCircuit(one, true);
    expect([guards.openUntil(one) > 0, guards.openUntil(other) > 0]).toEqual([false, true]);
    // Seen again (its row announced), it closes with the endpoint's other URL.
    for (const key of [two, one]) rowOpens(guards, key, 30_000);
    guards.closeCircuit(one, false);
    expect([guards.openUntil(one) > 0, guards.openUntil(two) > 0, guards.openUntil(other) > 0]).toEqual([false, false, true]);
  });
});

describe('a slow endpoint, not a paused dispatcher', () => {
  const request = { merchantId: 'm_fast', canDefer: true, force: false };
  const url = 'https://fast.example/h';
  const turn = () => new Promise((resolve) => setImmediate(resolve));

  it('waits for the slot of a request whose answer the process had no turn to read, rather than setting the delivery aside', async () => {
    const clock = { t: 0 };
    const guards = new EndpointGuards({ ...options, maxInFlight: 1, now: () => clock.t });
    const first = await guards.acquire(url, request, () => false);
    if (first?.kind !== 'send') throw new Error(`expected to send, got ${first?.kind}`);
    // The process did not run for 500 ms (a burst of the prefetch, a loaded host): the request looks old.
    clock.t = 500;
    let second: Awaited<ReturnType<EndpointGuards['acquire']>> | 'waiting' = 'waiting';
    const next = guards.acquire(url, request, () => false).then((a) => (second = a));
    await turn();
    expect(second).toBe('waiting');
    // Its answer is read on the next turn: the waiting delivery takes the slot, nothing is set aside.
    first.release('succeeded');
    await next;
    expect(second).toMatchObject({ kind: 'send' });

    const admitted = await next;
    if (admitted?.kind === 'send') admitted.release('succeeded');
  });

  it('sets aside once the oldest request stays unanswered a threshold more while the loop polls', async () => {
    const clock = { t: 0 };
    const guards = new EndpointGuards({ ...options, maxInFlight: 1, now: () => clock.t });
    expect(await guards.acquire(url, request, () => false)).toMatchObject({ kind: 'send' });
    clock.t = 1_000;
    let third: Awaited<ReturnType<EndpointGuards['acquire']>> | 'waiting' = 'waiting';
    const later = guards.acquire(url, request, () => false).then((a) => (third = a));
    await turn();
    expect(third).toBe('waiting');
    clock.t = 1_200;
    expect(await later).toEqual({ kind: 'defer' });
    expect(await guards.acquire(url, request, () => false)).toEqual({ kind: 'defer' });
  });
});

describe("a span-over delivery at an endpoint's full line", () => {
  it('fails as the circuit would only while the circuit still refuses: the flag admission set may be stale after a wait', async () => {
    const clock = { t: 0 };
    const guards = new EndpointGuards({ ...options, maxInFlight: 1, now: () => clock.t });
    const url = 'https://line.example/h';
    const plain = { merchantId: 'm_line', canDefer: false, force: false };
    const first = await guards.acquire(url, plain, () => false);
    if (first?.kind !== 'send') throw new Error(`expected to send, got ${first?.kind}`);
    clock.t = 2_000; // its usual latency: two seconds, so a line of one does not clear within a second
    first.release('succeeded');
    const inFlight = await guards.acquire(url, plain, () => false);
    const waiting = guards.acquire(url, plain, () => false);
    const spanOver = { merchantId: 'm_line', canDefer: true, force: true, spanOver: true };
    // Its circuit closed (it never opened here): set aside like any delivery, not failed untried.
    expect(await guards.acquire(url, spanOver, () => false)).toEqual({ kind: 'defer' });
    if (inFlight?.kind === 'send') inFlight.release('succeeded');
    const next = await waiting;
    if (next?.kind === 'send') next.release('succeeded');
  });
});

describe('deliveries waiting in line when the circuit opens', () => {
  it('are all answered open at once, not one per request that ends: a dead endpoint sends none for its cooldown', async () => {
    const clock = { t: 0 };
    const guards = new EndpointGuards({ ...options, maxInFlight: 1, failureThreshold: 1, now: () => clock.t });
    const url = 'https://dying.example/h';
    // No deferral left (MAX_DEFERRALS spent): no timer wakes them, only a slot or the circuit.
    const request = { merchantId: 'm_dying', canDefer: false, force: false };
    const inFlight = await guards.acquire(url, request, () => false);
    if (inFlight?.kind !== 'send') throw new Error(`expected to send, got ${inFlight?.kind}`);
    const answers: string[] = [];
    const line = Array.from({ length: 3 }, () => guards.acquire(url, request, () => false).then((a) => answers.push(a?.kind ?? 'stopped')));
    await new Promise((resolve) => setImmediate(resolve));
    expect(answers).toEqual([]);
    clock.t = 10_000;
    // The row opens (another dispatcher's failures) while its request is still out.
    guards.openCircuit(url, options.cooldownMs, options.cooldownMs);
    await new Promise((resolve) => setImmediate(resolve));
    // Left waiting, each held a prefetch slot until a probe's end woke it: minutes apart while probes fail.
    expect(answers).toEqual(['open', 'open', 'open']);
    await Promise.all(line);
    inFlight.release('failed', 'timeout');
  });
});

type Answer = Awaited<ReturnType<EndpointGuards['acquire']>> | 'waiting';
const nextTurn = () => new Promise((resolve) => setImmediate(resolve));

/** acquire(), its answer readable while it still waits. */
function admitted(guards: EndpointGuards, url: string, merchantId: string, canDefer = false) {
  const box: { answer: Answer } = { answer: 'waiting' };
  void guards.acquire(url, { merchantId, canDefer, force: false }, () => false).then((a) => (box.answer = a));
  return box;
}

async function sendingTo(guards: EndpointGuards, url: string, merchantId: string) {
  const admission = await guards.acquire(url, { merchantId, canDefer: false, force: false }, () => false);
  if (admission?.kind !== 'send') throw new Error(`expected to send to ${url}, got ${admission?.kind}`);
  return admission;
}

/** The request ends as the row it opened is announced (before the woken delivery runs). */
function failsAndOpens(guards: EndpointGuards, slot: { release(result: 'failed', error: string): number }, url: string) {
  guards.openCircuit(url, slot.release('failed', 'HTTP 500'), 30_000);
}

describe('a delivery woken for a slot it does not take (postponed by the circuit that end opened)', () => {
  it("hands the slot on to the one waiting for the process's room", async () => {
    const guards = new EndpointGuards({ maxInFlight: 1, maxTotalInFlight: 2, failureThreshold: 1, cooldownMs: 30_000, maxCooldownMs: 600_000, now: () => 0 });
    const a1 = await sendingTo(guards, 'https://a.example/h', 'm_a');
    const b1 = await sendingTo(guards, 'https://b.example/h', 'm_b');
    const a2 = admitted(guards, 'https://a.example/h', 'm_a');
    const c1 = admitted(guards, 'https://c.example/h', 'm_c');
    await nextTurn();
    expect([a2.answer, c1.answer]).toEqual(['waiting', 'waiting']);
    failsAndOpens(guards, a1, 'https://a.example/h');
    await nextTurn();
    expect(a2.answer).toMatchObject({ kind: 'open' });
    // Left asleep, it waited for b's request to end (an unrelated endpoint's timeout) beside a free slot.
    expect(c1.answer).toMatchObject({ kind: 'send' });
    b1.release('succeeded');
    guards.wakeAll();
  });

  it("hands it on along the merchant's line when the circuit opens", async () => {
    const guards = new EndpointGuards({ maxInFlight: 2, maxPerMerchant: 1, maxTotalInFlight: 8, failureThreshold: 1, cooldownMs: 30_000, maxCooldownMs: 600_000, now: () => 0 });
    const m1 = await sendingTo(guards, 'https://m.example/h', 'm_1');
    const line = [admitted(guards, 'https://m.example/h', 'm_1'), admitted(guards, 'https://m.example/h', 'm_1'), admitted(guards, 'https://m.example/h', 'm_1')];
    await nextTurn();
    // Its one request fails and opens the circuit: woken one per request that ends, the second and third slept for ever (no timer: no deferral left).
    failsAndOpens(guards, m1, 'https://m.example/h');
    await nextTurn();
    expect(line.map((l) => (l.answer === 'waiting' ? l.answer : l.answer?.kind))).toEqual(['open', 'open', 'open']);
    guards.wakeAll();
  });
});

describe("the host's clock stepped back while an endpoint is at its bound", () => {
  it('still sets a delivery aside behind a hung request: slow is judged on a monotonic clock', async () => {
    // The wall clock as the process reads it, from before the guards exist (they may keep Date.now).
    const real = Date.now.bind(Date);
    let stepMs = 0;
    const clock = jest.spyOn(Date, 'now').mockImplementation(() => real() + stepMs);
    const guards = new EndpointGuards({ maxInFlight: 1, failureThreshold: 5, cooldownMs: 30_000, maxCooldownMs: 600_000 });
    const url = 'https://hung.example/h';
    const hung = await sendingTo(guards, url, 'm_hung');
    try {
      // NTP steps it a minute back: the hung request must not look a minute younger.
      stepMs = -60_000;
      const next = admitted(guards, url, 'm_hung', true);
      const deadline = performance.now() + 2_000;
      while (next.answer === 'waiting' && performance.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
      expect(next.answer).toMatchObject({ kind: 'defer' });
    } finally {
      clock.mockRestore();
      hung.release('succeeded');
      guards.wakeAll();
    }
  });
});
