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

describe("an endpoint's queue stretched at each change of its adaptive rate", () => {
  it('is stretched by one UPDATE at a time, the changes meanwhile folded into the next (the latest rate wins)', async () => {
    const factors: number[] = [];
    let inFlight = 0;
    let most = 0;
    const held: Array<() => void> = [];
    const db = {
      query: async (text: string, params: unknown[]) => {
        if (!text.includes('UPDATE webhook_waits')) return { rows: [] };
        factors.push(params[2] as number);
        most = Math.max(most, ++inFlight);
        await new Promise<void>((resolve) => held.push(resolve));
        inFlight--;
        return { rows: [] };
      },
    } as unknown as Queryable;
    const throttle = new Throttle(db, silentLogger(), { now: () => 0 });
    const restretch = (before: number, after: number) =>
      (throttle as unknown as { restretch(key: string, webhook: Endpoint, before: number, after: number): void }).restretch('m_1\u001fep_1', { id: 'ep_1' } as Endpoint, before, after);
    restretch(8, 4);
    restretch(4, 2);
    restretch(2, 1);
    const turn = () => new Promise((resolve) => setImmediate(resolve));
    for (let i = 0; i < 10 && (held.length > 0 || factors.length < 2); i++) {
      await turn();
      held.shift()?.();
    }
    await turn();
    // 8/s to 4/s, then 4/s to 1/s at once: the queue ends laid out at the latest rate.
    expect({ factors, most }).toEqual({ factors: [2, 4], most: 1 });
  });
});
