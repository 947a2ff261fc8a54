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
