import { IntakeChecker, type IntakeKeyStore, type KeyNote, type KeyStates } from '../../libs/intake-keys/index.js';
import { silentLogger } from '../../libs/logger/index.js';

/**
 * The intake checker's batching and its outage rule, against a store that answers as told: intake
 * never waits on PostgreSQL beyond the check's timeout, and a key twice in one batch is one first
 * sight. Each test was seen failing on a broken variant (see the report of the change that added them).
 */
function storeOf(check: (keys: Array<{ merchantId: string; webhookId: string }>, notes: readonly KeyNote[]) => Promise<KeyStates>) {
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

  it('tries a check PostgreSQL aborted for a deadlock again at once, and rests only when PostgreSQL does not answer', async () => {
    // Seen failing ('unchecked', then 'unchecked' for the rest) on the checker that rested on any error, as before the fix.
    // Each statement's error, or none: a deadlock then an answer, then a refusal.
    const errors: unknown[] = [Object.assign(new Error('deadlock detected'), { code: '40P01' }), undefined, Object.assign(new Error('invalid input syntax'), { code: '22P02' })];
    const { store, calls } = storeOf(async () => {
      const err = errors.shift();
      if (err) throw err;
      return { repeats: new Set([0]), recorded: new Set(), changed: new Set() };
    });
    const checker = new IntakeChecker(store, silentLogger(), { timeoutMs: 5_000, restMs: 60_000 });
    expect(await checker.check(key('evt_1'), false)).toBe('repeat');
    // A refusal that is no outage costs its own batch only: the next check is asked.
    expect(await checker.check(key('evt_1'), false)).toBe('unchecked');
    expect(await checker.check(key('evt_1'), false)).toBe('repeat');
    expect(calls).toHaveLength(4);
    checker.stop();
  });

  it('makes a key twice in one batch one first sight, sends it once, and counts the repeat with the next batch', async () => {
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    const { store, calls } = storeOf(async () => {
      if (calls.length <= 2) await held;
      return { repeats: new Set(), recorded: new Set(), changed: new Set() };
    });
    const checker = new IntakeChecker(store, silentLogger());
    // A statement running for the blockers (started at the end of their turn); both copies, in the next turn, go in one batch.
    const blockers = [checker.check(key('evt_0'), false), checker.check(key('evt_00'), false)];
    await new Promise((resolve) => setImmediate(resolve));
    const copies = [checker.check(key('evt_twice'), false), checker.check(key('evt_twice'), false)];
    release();
    expect(await Promise.all(blockers)).toEqual(['first', 'first']);
    expect(await Promise.all(copies)).toEqual(['first', 'repeat']);
    // Dropped, as the dispatcher says of a repeat it acks undelivered.
    checker.dropped(key('evt_twice'));
    expect(await checker.check(key('evt_3'), false)).toBe('first');
    // The two copies went in one statement, as one key.
    expect(calls.filter((c) => c.keys.includes('evt_twice')).map((c) => c.keys)).toEqual([['evt_twice']]);
    expect(calls.flatMap((c) => c.notes.map((n) => n.webhookId))).toEqual(['evt_twice']);
    checker.stop();
  });

  it('answers in the order the checks came when a later statement finishes first', async () => {
    // The first statement is held; the second (its checks a turn later) answers at once.
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    const { store, calls } = storeOf(async () => {
      if (calls.length === 1) await held;
      return { repeats: new Set(), recorded: new Set(), changed: new Set() };
    });
    const checker = new IntakeChecker(store, silentLogger(), { timeoutMs: 60_000, restMs: 60_000 });
    const answers: string[] = [];
    const checked = (id: string) => checker.check(key(id), false).then((sight) => void answers.push(`${id}:${sight}`));
    const first = checked('evt_a');
    await new Promise((resolve) => setImmediate(resolve));
    const second = checked('evt_b');
    await new Promise((resolve) => setImmediate(resolve));
    await new Promise((resolve) => setImmediate(resolve));
    expect(calls).toHaveLength(2);
    release();
    await Promise.all([first, second]);
    expect(answers).toEqual(['evt_a:first', 'evt_b:first']);
    checker.stop();
  });

  it('sends the checks of one turn (the messages of one socket read) in one statement', async () => {
    const { store, calls } = storeOf(async () => ({ repeats: new Set(), recorded: new Set(), changed: new Set() }));
    const checker = new IntakeChecker(store, silentLogger());
    const burst = Array.from({ length: 20 }, (_, i) => checker.check(key(`evt_burst_${i}`), false));
    expect(await Promise.all(burst)).toEqual(burst.map(() => 'first'));
    expect(calls.map((c) => c.keys.length)).toEqual([20]);
    checker.stop();
  });

  it('tells a later copy of a key in one batch whose body differs from the first copy\'s', async () => {
    const { store } = storeOf(async () => ({ repeats: new Set(), recorded: new Set(), changed: new Set() }));
    const checker = new IntakeChecker(store, silentLogger());
    const copy = (n: number) => ({ ...key('evt_batch'), digest: Buffer.alloc(16, n) });
    // One turn: one batch.
    const sights = await Promise.all([checker.check(copy(1), false), checker.check(copy(1), false), checker.check(copy(2), false)]);
    expect(sights).toEqual(['first', 'repeat', 'changed']);
    checker.stop();
  });

  it("keeps two merchants' keys of one messageId apart in one batch: each a first sight", async () => {
    const { store, calls } = storeOf(async () => ({ repeats: new Set(), recorded: new Set(), changed: new Set() }));
    const checker = new IntakeChecker(store, silentLogger());
    const sights = await Promise.all([checker.check({ merchantId: 'm_a', webhookId: 'evt_same' }, false), checker.check({ merchantId: 'm_b', webhookId: 'evt_same' }, false)]);
    expect({ sights, keys: calls[0]!.keys }).toEqual({ sights: ['first', 'first'], keys: ['evt_same', 'evt_same'] });
    checker.stop();
  });

  it('lets a redelivered repeat go on only while the log holds no record of its webhook', async () => {
    const { store } = storeOf(async (keys) => ({
      repeats: new Set(keys.map((_, i) => i)),
      recorded: new Set(keys.flatMap((k, i) => (k.webhookId.startsWith('evt_recorded') ? [i] : []))),
      changed: new Set<number>(),
    }));
    const checker = new IntakeChecker(store, silentLogger());
    expect(await checker.check(key('evt_open'), true)).toBe('first');
    expect(await checker.check(key('evt_open'), false)).toBe('repeat');
    expect(await checker.check(key('evt_recorded'), true)).toBe('repeat');
    checker.stop();
  });

  it("drops a redelivered copy whose body differs from its key's first as a changed repeat, though the log holds no record", async () => {
    // Seen failing ('first': the changed body went on under the first's webhook-id) on the checker that tested the record before the body, as before the fix.
    const { store } = storeOf(async () => ({ repeats: new Set([0]), recorded: new Set<number>(), changed: new Set([0]) }));
    const checker = new IntakeChecker(store, silentLogger());
    expect(await checker.check(key('evt_corrected'), true)).toBe('changed');
    checker.stop();
  });

  // Upstream published a key twice; a dispatcher killed before settling either left both unacked, and
  // the broker gives both again in one read. Seen failing: both went on, as neither had a record.
  it('lets one of two redelivered copies of an unsettled key in one batch go on; the other is carried by it, not looked up in the log', async () => {
    const { store } = storeOf(async (keys) => ({ repeats: new Set(keys.map((_, i) => i)), recorded: new Set<number>(), changed: new Set<number>() }));
    const checker = new IntakeChecker(store, silentLogger());
    expect(await Promise.all([checker.check(key('evt_both'), true), checker.check(key('evt_both'), true)])).toEqual(['first', 'carried']);
    // A fresh repeat beside a redelivered copy: the redelivered one goes on, once.
    expect(await Promise.all([checker.check(key('evt_mixed'), false), checker.check(key('evt_mixed'), true), checker.check(key('evt_mixed'), true)])).toEqual(['repeat', 'first', 'carried']);
    checker.stop();
  });
  it("leaves of a redelivered repeat's endpoints those the log does not hold (a row from before endpoints is the first endpoint's), and all of them when PostgreSQL does not answer", async () => {
    const answers: Array<() => Promise<string[]>> = [async () => ['ep_b', ''], () => new Promise(() => {})];
    const store = { recordedEndpoints: () => answers.shift()!(), maintain: async () => ({ dropped: [] }) } as unknown as IntakeKeyStore;
    const checker = new IntakeChecker(store, silentLogger(), { timeoutMs: 50 });
    expect(await checker.unrecorded(key('evt_1'), ['ep_a', 'ep_b', 'ep_c'], 'ep_a')).toEqual(['ep_c']);
    expect(await checker.unrecorded(key('evt_1'), ['ep_a', 'ep_b'], 'ep_a')).toEqual(['ep_a', 'ep_b']);
    checker.stop();
  });
});
