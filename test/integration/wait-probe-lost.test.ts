import { HEADERS } from '../../libs/contracts/index.js';
import { WaitStore } from '../../libs/waits/index.js';
import { useTestDatabase } from '../support/postgres.js';
import { waitFor } from '../support/wait.js';

/** The wait lease of a dispatcher by default: what a probe whose hand-back never went waited out. */
const LEASE_MS = 60_000;

/**
 * PostgreSQL crashed (or the connection dropped) as it answered a circuit's probe: the probe was
 * committed (its parked wait unparked and leased with a new hand, the circuit's next probe a lease
 * away), and the scheduler, told only that the statement failed, published nothing. The endpoint
 * got its next probe a lease later (a minute), and with it every parked wait of the endpoint.
 */
describe('a probe whose answer was lost after its commit', () => {
  const postgres = useTestDatabase('wait_probe_lost', { maxConnections: 2 });

  /** A wait parked behind its endpoint's circuit, opened by it, whose probe time comes at once. */
  const parked = (webhookId: string, endpointId: string) => ({
    merchantId: 'm_probe_lost', webhookId, endpointId, hand: 0, attempt: 1, delayMs: 0, reason: 'retry' as const, content: Buffer.from('{}'),
    spanLeftMs: 3_600_000, circuitMs: 1, headers: { [HEADERS.attempts]: 1, [HEADERS.webhookId]: webhookId },
  });

  /** A store whose next statement or transaction, once `loseNext()` is called, is committed and its answer lost. */
  function lossyStore(): { lossy: WaitStore; loseNext: () => void } {
    let lose = false;
    const lost = <T>(result: T): T => {
      if (!lose) return result;
      lose = false;
      throw new Error('Connection terminated unexpectedly');
    };
    const lossy = new WaitStore({
      query: async (text, params) => lost(await postgres.database.query(text, params)),
      transaction: async (work) => lost(await postgres.database.transaction(work)),
    });
    return { lossy, loseNext: () => void (lose = true) };
  }

  const probeDue = (store: WaitStore, endpointId: string) =>
    waitFor(`${endpointId}'s probe time`, async () => (await store.probesDue(10, [])).some((c) => c.endpointId === endpointId));

  /** A wait's hand now (each hand is drawn anew, 0033: a later one is greater). */
  const handOf = async (webhookId: string) =>
    (await postgres.database.query<{ hand: number }>('SELECT hand FROM webhook_waits WHERE webhook_id = $1', [webhookId])).rows[0]!.hand;

  /** The lost probe's commit: its wait leased with a new hand (after `written`), not parked, and its circuit's next probe a lease away. Returns that hand. */
  async function expectLost(webhookId: string, endpointId: string, written: number): Promise<number> {
    const { rows } = await postgres.database.query<{ hand: number; parked: boolean; leased: boolean; later: boolean }>(
      `SELECT w.hand, w.parked, w.pick_at > now() + interval '50 seconds' AS leased, c.probe_at > now() + interval '50 seconds' AS later
       FROM webhook_waits w JOIN wait_circuits c USING (merchant_id, endpoint_id) WHERE w.webhook_id = $1 AND w.endpoint_id = $2`,
      [webhookId, endpointId],
    );
    expect(rows).toEqual([{ hand: expect.any(Number), parked: false, leased: true, later: true }]);
    expect(rows[0]!.hand).toBeGreaterThan(written);
    return rows[0]!.hand;
  }

  it('hands its wait back as the next probe, not a lease later; a probe answered keeps its lease', async () => {
    const store = new WaitStore(postgres.database);
    const { lossy, loseNext } = lossyStore();
    await store.write([parked('evt_probe_answered', 'ep_answered')], []);
    await probeDue(store, 'ep_answered');
    expect((await lossy.probe(10, LEASE_MS)).handed.map((w) => w.webhookId)).toEqual(['evt_probe_answered']);

    await store.write([parked('evt_probe_lost', 'ep_lost')], []);
    const written = await handOf('evt_probe_lost');
    await probeDue(store, 'ep_lost');
    loseNext();
    await expect(lossy.probe(10, LEASE_MS)).rejects.toThrow('Connection terminated unexpectedly');
    const lostHand = await expectLost('evt_probe_lost', 'ep_lost', written);

    // The next probe hands it back (a new hand), as the probe, and only it: the one answered keeps its lease.
    const next = await lossy.probe(10, LEASE_MS);
    expect(next.handed.map((w) => [w.webhookId, w.hand > lostHand, w.probe])).toEqual([['evt_probe_lost', true, true]]);
    expect(next.idle).toEqual([]);
    expect((await lossy.probe(10, LEASE_MS)).handed).toEqual([]);
  });

  it('a pick before the next probe parks its wait again (not handed back as a wait through the open circuit), and the probe hands it back', async () => {
    const store = new WaitStore(postgres.database);
    const { lossy, loseNext } = lossyStore();
    await store.write([parked('evt_probe_picked', 'ep_picked')], []);
    const written = await handOf('evt_probe_picked');
    await probeDue(store, 'ep_picked');
    loseNext();
    await expect(lossy.probe(10, LEASE_MS)).rejects.toThrow('Connection terminated unexpectedly');
    const lostHand = await expectLost('evt_probe_picked', 'ep_picked', written);

    expect(await lossy.pick(10, LEASE_MS)).toEqual({ handed: [], parked: 0 });
    const { rows } = await postgres.database.query<{ parked: boolean }>("SELECT parked FROM webhook_waits WHERE webhook_id = 'evt_probe_picked'");
    expect(rows).toEqual([{ parked: true }]);
    const next = await lossy.probe(10, LEASE_MS);
    expect(next.handed.map((w) => [w.webhookId, w.hand > lostHand, w.probe])).toEqual([['evt_probe_picked', true, true]]);
  });

  it('its circuit closed meanwhile: its wait is due at once, and the pick hands it back', async () => {
    const store = new WaitStore(postgres.database);
    const { lossy, loseNext } = lossyStore();
    await store.write([parked('evt_probe_closed', 'ep_closed')], []);
    const written = await handOf('evt_probe_closed');
    await probeDue(store, 'ep_closed');
    loseNext();
    await expect(lossy.probe(10, LEASE_MS)).rejects.toThrow('Connection terminated unexpectedly');
    const lostHand = await handOf('evt_probe_closed');
    expect(lostHand).toBeGreaterThan(written);
    await store.closeCircuits([{ merchantId: 'm_probe_lost', endpointId: 'ep_closed' }]);

    const { handed } = await lossy.pick(10, LEASE_MS);
    expect(handed.map((w) => [w.webhookId, w.hand > lostHand, w.probe])).toEqual([['evt_probe_closed', true, undefined]]);
  });
});
