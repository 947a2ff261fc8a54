import type { BrokerConnection } from '../../libs/broker/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { type HandedWait, WAIT_BATCHES_CONFIRMING, WaitScheduler, type WaitStore } from '../../libs/waits/index.js';

/** A store with `due` waits and a broker whose confirms come when the test says so. */
function fakes(due: number, ready = 0) {
  let next = 0;
  const picks: number[] = [];
  const unhanded: string[] = [];
  const store = {
    pick: async (limit: number) => {
      picks.push(limit);
      const n = Math.min(limit, due - next);
      return { handed: Array.from({ length: n }, (): HandedWait => ({ merchantId: 'm', webhookId: `wh_${next++}`, hand: 1, headers: {}, content: Buffer.alloc(0), leaseEnd: '' })), parked: 0 };
    },
    unhand: async (key: { webhookId: string }) => void unhanded.push(key.webhookId),
    // No circuit: no probe, nothing closing.
    probe: async () => ({ handed: [], idle: [] }),
    unparkClosed: async () => false,
  } as unknown as WaitStore;
  const confirms: Array<{ webhookId: string; settle: (ok: boolean) => void }> = [];
  const broker = {
    isConnected: true,
    createChannel: async () => ({ checkQueue: async () => ({ messageCount: ready }), close: async () => {} }),
    sendToQueue: (_queue: string, _content: Buffer, options: { messageId: string }) =>
      new Promise<void>((resolve, reject) => confirms.push({ webhookId: options.messageId, settle: (ok) => (ok ? resolve() : reject(new Error('nacked'))) })),
  } as unknown as BrokerConnection;
  return { store, broker, picks, unhanded, confirms };
}

const until = async (what: () => boolean) => {
  for (let i = 0; i < 200 && !what(); i++) await new Promise((r) => setTimeout(r, 5));
  expect(what()).toBe(true);
};

describe('WaitScheduler', () => {
  it('picks the next batch while the last one is still being confirmed, up to its bound, and counts unconfirmed hand-backs as ready', async () => {
    const { store, broker, picks, confirms } = fakes(100);
    const scheduler = new WaitScheduler(store, broker, silentLogger(), { dispatch: 'q', leaseMs: 1_000, batch: 10, maxReady: 35 });
    scheduler.start();
    // No confirm has come: still the scheduler picks batch after batch, 35 unconfirmed at most.
    await until(() => confirms.length === 35);
    await new Promise((r) => setTimeout(r, 50));
    expect(confirms.length).toBe(35);
    expect(picks.slice(0, 4)).toEqual([10, 10, 10, 5]);
    for (const c of confirms.splice(0)) c.settle(true);
    await until(() => confirms.length === 35);
    for (const c of confirms.splice(0)) c.settle(true);
    await until(() => confirms.length === 30);
    for (const c of confirms.splice(0)) c.settle(true);
    await scheduler.stop();
    expect(scheduler.stats).toEqual({ handed: 100, unconfirmed: 0, parked: 0, setAside: 0 });
  });

  it(`holds at most ${WAIT_BATCHES_CONFIRMING} batches awaiting confirms, and a hand-back not confirmed is due again`, async () => {
    const { store, broker, confirms, unhanded } = fakes(1_000);
    const scheduler = new WaitScheduler(store, broker, silentLogger(), { dispatch: 'q', leaseMs: 1_000, batch: 10 });
    scheduler.start();
    await until(() => confirms.length === 10 * WAIT_BATCHES_CONFIRMING);
    await new Promise((r) => setTimeout(r, 50));
    expect(confirms.length).toBe(10 * WAIT_BATCHES_CONFIRMING);
    // The first batch settles (one nacked): one more batch is picked, no more.
    const first = confirms.slice(0, 10);
    first.forEach((c, i) => c.settle(i !== 3));
    await until(() => confirms.length === 10 * WAIT_BATCHES_CONFIRMING + 10);
    expect(unhanded).toEqual(['wh_3']);
    const stopped = scheduler.stop();
    for (const c of confirms.slice(10)) c.settle(true);
    await stopped;
    expect(scheduler.stats).toEqual({ handed: 10 * WAIT_BATCHES_CONFIRMING + 9, unconfirmed: 1, parked: 0, setAside: 0 });
  });

  it('goes on picking after PostgreSQL fails under it (down, then back)', async () => {
    const { store, broker, confirms } = fakes(5);
    const pick = store.pick.bind(store);
    // Down, lost, then a statement timeout: an outage each, never taken for a row's refusal (no split pick).
    const errors = [new Error('connect ECONNREFUSED'), Object.assign(new Error('terminating connection'), { code: '57P01' }), Object.assign(new Error('canceling statement due to statement timeout'), { code: '57014' })];
    (store as { pick: WaitStore['pick'] }).pick = async (limit, leaseMs) => {
      const err = errors.shift();
      if (err) throw err;
      return pick(limit, leaseMs);
    };
    let splits = 0;
    (store as { due: WaitStore['due'] }).due = async () => (splits++, []);
    const scheduler = new WaitScheduler(store, broker, silentLogger(), { dispatch: 'q', leaseMs: 1_000, pollMs: 10 });
    scheduler.start();
    for (let i = 0; i < 1_000 && confirms.length < 5; i++) await new Promise((r) => setTimeout(r, 10));
    expect(confirms.map((c) => c.webhookId)).toEqual(['wh_0', 'wh_1', 'wh_2', 'wh_3', 'wh_4']);
    for (const c of confirms) c.settle(true);
    await scheduler.stop();
    expect(scheduler.stats).toEqual({ handed: 5, unconfirmed: 0, parked: 0, setAside: 0 });
    expect(splits).toBe(0);
  });
});
