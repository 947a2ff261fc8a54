import { SharedRateLimiter } from '../../apps/api/rate-limit.js';
import { useTestDatabase } from '../support/postgres.js';

/** The limit every API replica shares: its verdicts and its Retry-After come from one statement. */
describe('the shared rate limit in PostgreSQL', () => {
  const postgres = useTestDatabase('shared_rate_limit', { maxConnections: 4 });

  it('allows the burst, then refuses with the wait until the next token, per key and per limit', async () => {
    // 6 a minute: a token every 10 s; a burst of 2.
    const limiter = new SharedRateLimiter(postgres.database, 'resend', 6, 2);
    expect(await limiter.take('m_a')).toEqual({ ok: true });
    expect(await limiter.take('m_a')).toEqual({ ok: true });
    // 10 s less the time these takes took (under a second on a busy machine too), rounded up.
    for (const refused of [await limiter.take('m_a'), await limiter.take('m_a')]) {
      // A refusal takes nothing: the second wait is no longer than the first.
      expect(refused.ok).toBe(false);
      expect(refused.ok === false && refused.retryAfterSeconds).toBeGreaterThanOrEqual(9);
      expect(refused.ok === false && refused.retryAfterSeconds).toBeLessThanOrEqual(10);
    }
    expect(await limiter.take('m_b')).toEqual({ ok: true });
    expect(await new SharedRateLimiter(postgres.database, 'portal-tests', 6, 2).take('m_a')).toEqual({ ok: true });
  });

  it('lets exactly the burst through when replicas take at once', async () => {
    const replicas = [1, 2, 3, 4].map(() => new SharedRateLimiter(postgres.database, 'portal-settings', 1, 5));
    const answers = await Promise.all(Array.from({ length: 20 }, (_, i) => replicas[i % 4]!.take('m_race')));
    expect(answers.filter((a) => a.ok)).toHaveLength(5);
    for (const refused of answers.filter((a) => !a.ok)) expect(refused).toMatchObject({ retryAfterSeconds: expect.any(Number) });
  });
});
