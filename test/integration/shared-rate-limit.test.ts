import { SharedRateLimiter } from '../../apps/api/rate-limit.js';
import { type Database, openPostgres } from '../../libs/delivery-store/index.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';

/** The limit every API replica shares: its verdicts and its Retry-After come from one statement. */
describe('the shared rate limit in PostgreSQL', () => {
  let db: TestDatabase;
  let database: Database;

  beforeAll(async () => {
    db = await createTestDatabase('shared_rate_limit');
    database = openPostgres(db.url, { maxConnections: 4 });
  });

  afterAll(async () => {
    await database?.close();
    await db?.drop();
  });

  it('allows the burst, then refuses with the wait until the next token, per key and per limit', async () => {
    // 6 a minute: a token every 10 s; a burst of 2.
    const limiter = new SharedRateLimiter(database, 'resend', 6, 2);
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
    expect(await new SharedRateLimiter(database, 'portal-tests', 6, 2).take('m_a')).toEqual({ ok: true });
  });

  it('lets exactly the burst through when replicas take at once', async () => {
    const replicas = [1, 2, 3, 4].map(() => new SharedRateLimiter(database, 'portal-settings', 1, 5));
    const answers = await Promise.all(Array.from({ length: 20 }, (_, i) => replicas[i % 4]!.take('m_race')));
    expect(answers.filter((a) => a.ok)).toHaveLength(5);
    for (const refused of answers.filter((a) => !a.ok)) expect(refused).toMatchObject({ retryAfterSeconds: expect.any(Number) });
  });
});
