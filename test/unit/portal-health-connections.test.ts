import { endpointHealth } from '../../libs/portal/health.js';

/** DESIGN.md: one merchant's heavy reads hold 2 of the log pool's 10 connections (2 reads in flight), so a read is one statement at a time. */
describe("the portal overview's health read", () => {
  it('runs its statements one after the other, holding one connection of the pool', async () => {
    let running = 0;
    let most = 0;
    const db = {
      query: async () => {
        most = Math.max(most, ++running);
        await new Promise((resolve) => setImmediate(resolve));
        running--;
        return { rows: [] as never[] };
      },
    };
    const health = await endpointHealth(db, 'm_one');
    expect(health).toBeDefined();
    expect(most).toBe(1);
  });
});
