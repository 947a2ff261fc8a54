import { createHook } from 'node:async_hooks';
import { openPostgres } from '../../libs/delivery-store/index.js';

const DATABASE_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';

/**
 * The heartbeat on a LISTEN connection: each beat once waited on `lost` with a race of its own, and
 * each race left a promise hanging on `lost` (which settles only when the connection ends): a
 * listener that lives for days grew by one every statement timeout.
 */
describe("a listener's heartbeat", () => {
  it('hangs nothing more on its `lost` at each beat', async () => {
    const ids = new WeakMap<object, number>();
    const children = new Map<number, number>();
    const hook = createHook({
      init(asyncId, type, triggerAsyncId, resource) {
        if (type !== 'PROMISE') return;
        ids.set(resource as object, asyncId);
        children.set(triggerAsyncId, (children.get(triggerAsyncId) ?? 0) + 1);
      },
    }).enable();
    // A beat every 20 ms (the statement timeout): 50 of them in a second.
    const database = openPostgres(DATABASE_URL, { statementTimeoutMs: 20, maxConnections: 1 });
    try {
      const listener = await database.listen('test_heartbeat_merged', () => {});
      const lost = ids.get(listener.lost);
      expect(lost).toBeDefined();
      const before = children.get(lost!) ?? 0;
      const deadline = Date.now() + 1_000;
      while (Date.now() < deadline && (children.get(lost!) ?? 0) - before < 10) await new Promise((resolve) => setTimeout(resolve, 20));
      expect((children.get(lost!) ?? 0) - before).toBeLessThan(3);
      await listener.close();
    } finally {
      hook.disable();
      await database.close();
    }
  });
});
