import { HandBackTakes } from '../../../apps/dispatcher/stages/hand-backs.js';
import type { IntakeEvent } from '../../../apps/dispatcher/stages/intake.js';
import { silentLogger } from '../../../libs/logger/index.js';
import type { WaitStore, WaitWriter } from '../../../libs/waits/index.js';

const intake: IntakeEvent = {
  merchantId: 'm_1', event: 'charge.completed', references: ['ref_1'], body: '{}', webhookId: 'evt_1',
  attempts: 1, deferrals: 0, postponements: 0, firstSeenAt: '2026-01-01T11:59:00.000Z', accepted: true, hand: 3, ordered: true,
};

describe("an ordered hand-back whose take PostgreSQL does not answer", () => {
  it('is held until its channel closes, then given up untried: the broker has given it to another, which alone may send it', async () => {
    let asked = 0;
    const store = { take: async () => (asked++, Promise.reject(new Error('connect ECONNREFUSED 127.0.0.1:5432'))) } as unknown as WaitStore;
    const takes = new HandBackTakes({ store, writer: {} as WaitWriter }, 60_000, silentLogger(), () => false);
    let live = true;
    const taking = takes.take(intake, 3, undefined, () => live);
    const deadline = Date.now() + 5_000;
    while (asked < 1 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 10));
    expect(asked).toBe(1);
    // The connection lost meanwhile: its next try finds the channel closed.
    live = false;
    const found = await Promise.race([taking, new Promise((resolve) => setTimeout(() => resolve('still held'), 3_000))]);
    expect(found).toEqual({ kind: 'stopping' });
  });
});
