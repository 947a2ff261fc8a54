import { EndpointGuards } from '../../apps/dispatcher/stages/endpoint-guards.js';

const options = { maxInFlight: 2, failureThreshold: 2, cooldownMs: 30_000, maxCooldownMs: 600_000, maxEndpoints: 1_000 };

async function deliverOnce(guards: EndpointGuards, url: string, result: 'succeeded' | 'failed' = 'succeeded') {
  const admission = await guards.acquire(url, { merchantId: 'm_1', canDefer: true, force: false }, () => false);
  if (admission?.kind !== 'send') throw new Error(`expected to send to ${url}, got ${admission?.kind}`);
  admission.release(result, result === 'failed' ? 'HTTP 500' : undefined);
}

describe('the per-endpoint breaker map', () => {
  it('keeps bounded state after 100,000 distinct URLs seen once, and keeps the open circuits', async () => {
    const clock = 1_000_000;
    const guards = new EndpointGuards({ ...options, now: () => clock });
    const broken = 'https://down.example.com/hook';
    await deliverOnce(guards, broken, 'failed');
    await deliverOnce(guards, broken, 'failed');
    expect(guards.openUntil(broken)).toBeGreaterThan(clock);

    for (let i = 0; i < 100_000; i++) await deliverOnce(guards, `https://shop-${i}.example.com/hooks/${i}`);
    expect(guards.size).toBeLessThanOrEqual(options.maxEndpoints);
    // The circuit of the endpoint that is down stays open: pruning forgets idle closed ones first.
    expect(guards.openUntil(broken)).toBeGreaterThan(clock);
    expect(guards.openEndpoints()).toEqual(['https://down.example.com (m_1)']);
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
  const send = { merchantId: 'm_1', canDefer: true, force: false };
  const acquire = (guards: EndpointGuards, url: string) => guards.acquire(url, send, () => false);
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

  it("gives a freed slot to the endpoint's own waiter first, then to those waiting for the process", async () => {
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

  it('counts a probe of an open circuit against the bound, and hands back waiters on stop', async () => {
    const clock = { t: 0 };
    const guards = new EndpointGuards({ ...options, failureThreshold: 1, cooldownMs: 100, maxTotalInFlight: 1, now: () => clock.t });
    const failed = await sending(guards, 'https://down.example.com/h');
    failed.release('failed', 'HTTP 500');
    clock.t = 1_000; // the cooldown is over: the next delivery would probe
    const held = await sending(guards, 'https://up.example.com/h');
    let stopped = false;
    const probe = guards.acquire('https://down.example.com/h', send, () => stopped);
    await new Promise((resolve) => setImmediate(resolve));
    expect(guards.waitingForRoom).toBe(1);
    stopped = true;
    guards.wakeAll();
    expect(await probe).toBeUndefined();
    held.release('succeeded');
    expect(guards.inFlight).toBe(0);
  });
});
