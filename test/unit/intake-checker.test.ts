import { IntakeChecker, type IntakeKeyStore, type KeyNote, type KeyState } from '../../libs/intake-keys/index.js';
import { silentLogger } from '../../libs/logger/index.js';

/**
 * The intake checker's batching and its outage rule, against a store that answers as told: intake
 * never waits on PostgreSQL beyond the check's timeout, and a key twice in one batch is one first
 * sight. Each test was seen failing on a broken variant (see the report of the change that added them).
 */
function storeOf(check: (keys: Array<{ merchantId: string; webhookId: string }>, notes: readonly KeyNote[]) => Promise<Map<string, KeyState>>) {
  const calls: Array<{ keys: string[]; notes: readonly KeyNote[] }> = [];
  const store = {
    check: (keys: Array<{ merchantId: string; webhookId: string }>, notes: readonly KeyNote[]) => {
      calls.push({ keys: keys.map((k) => k.webhookId), notes });
      return check(keys, notes);
    },
    maintain: async () => ({ dropped: [] }),
  } as unknown as IntakeKeyStore;
  return { store, calls };
}

const key = (webhookId: string) => ({ merchantId: 'm_1', webhookId });

describe('intake checker', () => {
  it('lets messages through unchecked when PostgreSQL does not answer, then skips the check for its rest', async () => {
    const { store, calls } = storeOf(() => new Promise(() => {}));
    const checker = new IntakeChecker(store, silentLogger(), { timeoutMs: 50, restMs: 60_000 });
    const started = performance.now();
    expect(await checker.check(key('evt_1'), false)).toBe('unchecked');
    expect(performance.now() - started).toBeLessThan(5_000);
    expect(await checker.check(key('evt_2'), false)).toBe('unchecked');
    expect(calls).toHaveLength(1);
    checker.stop();
  });

  it('makes a key twice in one batch one first sight, and notes the repeat with the next batch', async () => {
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    const { store, calls } = storeOf(async (keys) => {
      if (calls.length === 1) await held;
      return new Map(keys.map((k) => [`${k.merchantId}\u001f${k.webhookId}`, { first: true, ended: false }]));
    });
    const checker = new IntakeChecker(store, silentLogger());
    const blocker = checker.check(key('evt_0'), false);
    // Both copies queue while the first statement runs: one batch.
    const copies = [checker.check(key('evt_twice'), false), checker.check(key('evt_twice'), false)];
    release();
    expect(await blocker).toBe('first');
    expect(await Promise.all(copies)).toEqual(['first', 'repeat']);
    checker.ended(key('evt_twice'));
    expect(await checker.check(key('evt_3'), false)).toBe('first');
    expect(calls.flatMap((c) => c.notes.map((n) => `${n.kind}:${n.webhookId}`))).toEqual(['duplicate:evt_twice', 'ended:evt_twice']);
    checker.stop();
  });
});
