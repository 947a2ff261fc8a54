import { clientKey, MemoryRateLimiter, REMEMBERED_REFUSALS, RememberedRefusals } from '../../apps/api/rate-limit.js';

describe('the per-address limit of the portal', () => {
  it('keys an IPv4 address as it is, an IPv4-mapped one as its IPv4, and an IPv6 one by its /64', () => {
    expect(clientKey('203.0.113.7')).toBe('203.0.113.7');
    expect(clientKey('::ffff:203.0.113.7')).toBe('203.0.113.7');
    expect(clientKey('2001:db8:1:2:aaaa::1')).toBe('2001:db8:1:2::/64');
    expect(clientKey('2001:db8:1:2:bbbb:cccc:dddd:eeee')).toBe('2001:db8:1:2::/64');
    expect(clientKey('2001:db8::1')).toBe('2001:db8:0:0::/64');
    expect(clientKey('::1')).toBe('0:0:0:0::/64');
    expect(clientKey(undefined)).toBe('unknown');
  });

  it('keys an address with a port, as some proxies write it in X-Forwarded-For, by the address alone: one bucket per client, not per connection', () => {
    expect(clientKey('203.0.113.5:1111')).toBe('203.0.113.5');
    expect(clientKey('203.0.113.5:2222')).toBe(clientKey('203.0.113.5:1111'));
    expect(clientKey('203.0.113.5:1111')).not.toBe(clientKey('203.9.9.9:1111'));
    expect(clientKey('[2001:db8:1:2::7]:443')).toBe('2001:db8:1:2::/64');
    expect(clientKey('[2001:db8:1:2::8]')).toBe('2001:db8:1:2::/64');
    expect(clientKey('[::ffff:203.0.113.5]:80')).toBe('203.0.113.5');
  });

  it('keys what is no address, even with a port stripped, on one shared key rather than on its text', () => {
    for (const text of ['unknown', 'proxy.example:80', '203.0.113.5:port', '1.2.3.4.5', 'gg::1', '[203.0.113.5]:80']) expect(clientKey(text)).toBe('invalid');
  });

  it('answers a refused key from memory until its Retry-After runs out, without asking the limiter', async () => {
    let now = 0;
    let asked = 0;
    const inner = new MemoryRateLimiter(30, 2, () => now);
    const limiter = new RememberedRefusals({ take: (key) => (asked++, inner.take(key)) }, () => now);
    expect((await limiter.take('a')).ok).toBe(true);
    expect((await limiter.take('a')).ok).toBe(true);
    expect(await limiter.take('a')).toEqual({ ok: false, retryAfterSeconds: 2 });
    expect(asked).toBe(3);
    now = 1_000;
    expect(limiter.refused('a')).toEqual({ ok: false, retryAfterSeconds: 1 });
    expect(await limiter.take('a')).toEqual({ ok: false, retryAfterSeconds: 1 });
    expect(asked).toBe(3);
    expect(limiter.refused('b')).toBeUndefined();
    now = 2_000;
    expect(limiter.refused('a')).toBeUndefined();
    expect((await limiter.take('a')).ok).toBe(true);
    expect(asked).toBe(4);
  });

  it('keeps at most its bound of refusals, forgetting the oldest first, never all at once', async () => {
    const limiter = new RememberedRefusals({ take: async () => ({ ok: false, retryAfterSeconds: 60 }) }, () => 0);
    const keys = Array.from({ length: REMEMBERED_REFUSALS + 1 }, (_, i) => `k${i}`);
    for (const key of keys) await limiter.take(key);
    expect(keys.map((key) => limiter.refused(key) !== undefined)).toEqual([false, ...Array(REMEMBERED_REFUSALS).fill(true)]);
  });
});
