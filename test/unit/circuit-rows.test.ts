import { CircuitRows } from '../../apps/dispatcher/circuit-rows.js';
import { EndpointGuards } from '../../apps/dispatcher/stages/endpoint-guards.js';
import type { Listener } from '../../libs/delivery-store/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import type { CircuitState } from '../../libs/waits/index.js';

const open = (probeInMs: number): CircuitState & { open: true } => ({ merchantId: 'm_1', endpointId: 'ep_1', open: true, cooldownMs: 30_000, probeInMs });

/**
 * A dispatcher's breakers as its circuits' rows say, read when its LISTEN starts: a row's close
 * announced while that read is under way (committed after the read's snapshot) is heard before the
 * read answers. Applied at once, the read's older answer undid it: the breaker stayed open, and
 * postponed what the row had let go, until the next announcement of that row.
 */
describe('a breaker catching up with the rows as its LISTEN starts', () => {
  it("keeps a close announced while the open rows were read: the read's older answer does not undo it", async () => {
    const guards = new EndpointGuards({ maxInFlight: 1, failureThreshold: 5, cooldownMs: 30_000, maxCooldownMs: 600_000, now: () => 1_000_000 });
    let announce!: (payload: string) => void;
    const listener: Listener = { lost: new Promise(() => {}), query: async () => ({ rows: [] }) as never, close: async () => {} };
    const db = { listen: async (_channel: string, onPayload: (payload: string) => void) => ((announce = onPayload), listener) };
    let answered!: () => void;
    const read = new Promise<void>((resolve) => (answered = resolve));
    // The read: the row open at its snapshot; its close commits (and is announced) before the answer comes.
    const store = {
      openCircuits: async () => {
        announce(JSON.stringify({ m: 'm_1', e: 'ep_1', open: false, answered: true }));
        answered();
        return [open(30_000)];
      },
    };
    const rows = new CircuitRows(db, store, () => 'm_1\u001fhttps://one.example/h', guards, silentLogger());
    rows.start();
    await read;
    await new Promise((resolve) => setImmediate(resolve));
    expect(guards.openUntil('m_1\u001fhttps://one.example/h')).toBe(0);
    // Announced after the read: as said.
    announce(JSON.stringify({ m: 'm_1', e: 'ep_1', open: true, cooldown: 30_000, probe: 30_000 }));
    expect(guards.openUntil('m_1\u001fhttps://one.example/h')).toBe(1_030_000);
    await rows.stop();
  });

  it('closes a breaker open here whose row is no longer open (its close announced while it was not listening)', async () => {
    const guards = new EndpointGuards({ maxInFlight: 1, failureThreshold: 5, cooldownMs: 30_000, maxCooldownMs: 600_000, now: () => 1_000_000 });
    guards.openCircuit('m_1\u001fhttps://one.example/h', 30_000, 30_000);
    guards.openCircuit('m_2\u001fhttps://two.example/h', 30_000, 30_000);
    const listener: Listener = { lost: new Promise(() => {}), query: async () => ({ rows: [] }) as never, close: async () => {} };
    let read!: () => void;
    const done = new Promise<void>((resolve) => (read = resolve));
    const store = { openCircuits: async () => (read(), [{ ...open(5_000), merchantId: 'm_2', endpointId: 'ep_2' }]) };
    const rows = new CircuitRows({ listen: async () => listener }, store, (m) => (m === 'm_1' ? 'm_1\u001fhttps://one.example/h' : 'm_2\u001fhttps://two.example/h'), guards, silentLogger());
    rows.start();
    await done;
    await new Promise((resolve) => setImmediate(resolve));
    expect(guards.openKeys()).toEqual(['m_2\u001fhttps://two.example/h']);
    expect(guards.openUntil('m_2\u001fhttps://two.example/h')).toBe(1_005_000);
    await rows.stop();
  });
});
