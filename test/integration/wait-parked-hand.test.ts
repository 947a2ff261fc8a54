import { HEADERS } from '../../libs/contracts/index.js';
import { WaitStore } from '../../libs/waits/index.js';
import { useTestDatabase } from '../support/postgres.js';
import { waitFor } from '../support/wait.js';

/** A dispatcher's take lease: what keeps a hand-back's attempt from being handed on again meanwhile. */
const TAKE_LEASE_MS = 60_000;

/**
 * A hand-back behind a dispatch backlog longer than its lease, its endpoint's circuit opened meanwhile:
 * the pick after the lease parked the row and kept its hand, so the copy still in the backlog stayed
 * current. Taken once the circuit closed (its dispatcher's breaker closed), it was POSTed; and the
 * close's unpark made the same row due at once, so the pick handed it on with a new hand, POSTed
 * again, its attempt's end no longer matching the row.
 */
describe('a hand-back left in dispatch past its lease, its row parked meanwhile by an open circuit', () => {
  const postgres = useTestDatabase('wait_parked_hand', { maxConnections: 3 });
  const merchantId = 'm_parked_hand';
  const endpointId = 'ep_parked_hand';
  const wait = (webhookId: string, circuitMs?: number) => ({
    merchantId, webhookId, endpointId, hand: 0, attempt: 1, delayMs: 0, reason: 'retry' as const,
    content: Buffer.from('{}'), spanLeftMs: 3_600_000, ...(circuitMs ? { circuitMs } : {}),
    headers: { [HEADERS.attempts]: 1, [HEADERS.webhookId]: webhookId },
  });
  const key = (webhookId: string, hand: number) => ({ merchantId, webhookId, endpointId, hand });

  it('comes to no attempt once its row is parked: after the close, its wait is handed on once, by a new hand', async () => {
    const store = new WaitStore(postgres.database);
    await store.write([wait('evt_backlogged')], []);
    // Handed back with a short lease: its copy sits in dispatch past it.
    const [first] = (await store.pick(10, 200)).handed;
    expect(first?.webhookId).toBe('evt_backlogged');
    // Another webhook's failure opens the endpoint's circuit.
    await store.write([wait('evt_opener', 60_000)], []);
    const over = "SELECT 1 FROM webhook_waits WHERE webhook_id = 'evt_backlogged' AND pick_at <= now()";
    await waitFor('the lease over', async () => (await postgres.database.query(over)).rows.length === 1);
    expect(await store.pick(10, TAKE_LEASE_MS)).toEqual({ handed: [], parked: 1 });

    // The circuit closes (its probe answered), and the backlogged copy comes to a dispatcher.
    await store.closeCircuits([{ merchantId, endpointId }]);
    const old = (await store.take([key('evt_backlogged', first!.hand)], TAKE_LEASE_MS)).size === 1;
    // The schedulers make the parked waits due, and pick them.
    while (await store.unparkClosed(500)) { /* each round makes more due */ }
    const next = (await store.pick(10, TAKE_LEASE_MS)).handed.filter((w) => w.webhookId === 'evt_backlogged');
    const taken = next.length === 1 &&
      (await store.take([key('evt_backlogged', next[0]!.hand)], TAKE_LEASE_MS)).size === 1;
    // One attempt: not the old copy and the new hand both, within the take's lease.
    expect({ old, taken }).toEqual({ old: false, taken: true });
  });
});
