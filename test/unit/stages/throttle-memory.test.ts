import { REMEMBERED_ENDPOINTS, Throttle } from '../../../apps/dispatcher/stages/throttle.js';
import type { Queryable } from '../../../libs/delivery-store/index.js';
import { silentLogger } from '../../../libs/logger/index.js';
import type { Endpoint } from '../../../libs/merchants/index.js';

/**
 * The throttle remembers REMEMBERED_ENDPOINTS endpoints per map: one more forgets the one set
 * longest ago, not all of them. Seen through the pacing it does alone while PostgreSQL does not
 * answer: an endpoint at 0.5/s admitted once has its next slot 2 s ahead, past the 1 s it may
 * hold, so a second delivery waits; a forgotten endpoint would be sent at once.
 */
describe('the throttle past REMEMBERED_ENDPOINTS endpoints', () => {
  const down = { query: async () => Promise.reject(new Error('ECONNREFUSED')) } as unknown as Queryable;
  const webhook = (id: string) => ({ id, maxPerSecond: 0.5 }) as Endpoint;

  it('forgets the endpoint set longest ago and keeps the others', async () => {
    const throttle = new Throttle(down, silentLogger(), { now: () => 0 });
    for (let i = 0; i <= REMEMBERED_ENDPOINTS; i++) expect((await throttle.admit('m_1', webhook(`ep_${i}`), () => false)).kind).toBe('go');
    // ep_0 was forgotten to make room for ep_10000; ep_1 and ep_10000 are still paced.
    expect((await throttle.admit('m_1', webhook('ep_1'), () => false)).kind).toBe('wait');
    expect((await throttle.admit('m_1', webhook(`ep_${REMEMBERED_ENDPOINTS}`), () => false)).kind).toBe('wait');
    expect((await throttle.admit('m_1', webhook('ep_0'), () => false)).kind).toBe('go');
  });
});
