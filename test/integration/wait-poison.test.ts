import { HEADERS, sampleEvent } from '../../libs/contracts/index.js';
import { openPostgres } from '../../libs/delivery-store/index.js';
import { WaitStore, WaitTaker } from '../../libs/waits/index.js';
import { createTestDatabase } from '../support/postgres.js';
import { type Harness, startHarness, testMerchant } from '../support/harness.js';
import { failOnceThenSucceed, Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

/**
 * One wait row PostgreSQL refuses (here a trigger raising with its default SQLSTATE, P0001, as an
 * operator's rule would; a constraint or a value refused are others) must cost only itself: not
 * every wait picked with it, not every delivery batched with it.
 */

/** A trigger of the test's own database refusing `op` on the rows of `merchantId` (a merchant of one webhook). */
async function refuse(harness: Harness, op: 'INSERT OR UPDATE' | 'UPDATE', merchantId: string): Promise<void> {
  const row = op === 'UPDATE' ? 'OLD' : 'NEW';
  await harness.database.query(`CREATE FUNCTION refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN IF ${row}.merchant_id = '${merchantId}' THEN RAISE EXCEPTION 'this wait is refused'; END IF; RETURN NEW; END $$`);
  await harness.database.query(`CREATE TRIGGER refuse_poison BEFORE ${op} ON webhook_waits FOR EACH ROW EXECUTE FUNCTION refuse_poison()`);
}

async function waitsOf(harness: Harness): Promise<Array<{ merchant_id: string; webhook_id: string; hand: number }>> {
  return harness.database.query('SELECT merchant_id, webhook_id, hand FROM webhook_waits ORDER BY merchant_id, webhook_id');
}

describe('a wait whose write PostgreSQL refuses with a trigger (P0001, not a data exception)', () => {
  it('is parked in invalid with the reason alone; the waits batched with it and after it are written, nothing held', async () => {
    const receiver = await Receiver.start(() => 500);
    const poison = testMerchant('m_poison_write', receiver.url);
    const others = testMerchant('m_poison_write_ok', receiver.url);
    const harness = await startHarness({ name: 'wait-poison-write', merchants: [poison, others], retryDelaysMs: [60_000] });
    try {
      await refuse(harness, 'INSERT OR UPDATE', poison.id);
      const { messageId } = await harness.publisher.publish(sampleEvent('payout', poison.id));
      await receiver.waitForRequests(1, 10_000);
      // Published while the refused one is being retried: they join its batch.
      for (let i = 0; i < 3; i++) await harness.publisher.publish(sampleEvent('payout', others.id));
      await waitFor('the other waits written', async () => (await waitsOf(harness)).length === 3, 10_000);
      expect((await waitsOf(harness)).map((w) => w.merchant_id)).toEqual([others.id, others.id, others.id]);
      const [parked] = await harness.test.drain(harness.names.invalid, 1, 10_000);
      expect(parked!.properties.messageId).toBe(messageId);
      expect(parked!.properties.headers?.[HEADERS.invalidCode]).toBe('internal-error');
      expect(String(parked!.properties.headers?.[HEADERS.invalidReason])).toMatch(/this wait is refused/);
      await waitFor('nothing held unacked', () => harness.dispatcher.unacked === 0, 5_000);
    } finally {
      await harness.close();
      await receiver.close();
    }
  }, 60_000);
});

describe('a due wait whose pick PostgreSQL refuses', () => {
  it('is left in its row, and the waits due with it are handed back and delivered', async () => {
    const failing = await Receiver.start(() => 500);
    const receiver = await Receiver.start(failOnceThenSucceed());
    const poison = testMerchant('m_poison_pick', failing.url);
    const other = testMerchant('m_poison_pick_ok', receiver.url);
    const harness = await startHarness({ name: 'wait-poison-pick', merchants: [poison, other], retryDelaysMs: [300] });
    try {
      await refuse(harness, 'UPDATE', poison.id);
      const { messageId } = await harness.publisher.publish(sampleEvent('payout', poison.id));
      await waitFor('its wait written', async () => (await waitsOf(harness)).length === 1, 10_000);
      const [written] = await waitsOf(harness);
      const { messageId: otherId } = await harness.publisher.publish(sampleEvent('payout', other.id));
      // Its retry, due after the refused one: handed back, delivered, its wait ended.
      await waitFor('the other delivered on its retry', () => receiver.requests.length >= 2, 10_000);
      expect(receiver.requests.map((r) => r.headers['webhook-id'])).toEqual([otherId, otherId]);
      await waitFor('its wait ended', async () => (await waitsOf(harness)).length === 1, 5_000);
      // Nothing lost: the refused one's row stays as it was written (its first hand), its bytes with it.
      expect(await waitsOf(harness)).toEqual([{ merchant_id: poison.id, webhook_id: messageId, hand: written!.hand }]);
      expect(failing.requests).toHaveLength(1);
    } finally {
      await harness.close();
      await receiver.close();
      await failing.close();
    }
  }, 60_000);
});

describe("a parked wait whose probe PostgreSQL refuses (its circuit's probe time come)", () => {
  it('does not stop the pick: the waits due elsewhere are handed back and delivered', async () => {
    const receiver = await Receiver.start(failOnceThenSucceed());
    const other = testMerchant('m_poison_probe_ok', receiver.url);
    const harness = await startHarness({ name: 'wait-poison-probe', merchants: [other], retryDelaysMs: [300] });
    try {
      // A dead endpoint's wait, parked behind its circuit, whose probe is due in 50 ms, refused any change:
      // the refusal first, as the scheduler's probe round may come before the next statement.
      await refuse(harness, 'UPDATE', 'm_poison_probe');
      await harness.waits.write([{ merchantId: 'm_poison_probe', webhookId: 'evt_parked', endpointId: 'ep_dead', hand: 0, attempt: 1, delayMs: 0, reason: 'retry', headers: { [HEADERS.webhookId]: 'evt_parked' }, content: Buffer.from('{}'), spanLeftMs: 3_600_000, circuitMs: 50 }], []);
      const written = (await waitsOf(harness)).find((w) => w.merchant_id === 'm_poison_probe')!;
      const { messageId } = await harness.publisher.publish(sampleEvent('payout', other.id));
      await waitFor('delivered on its retry', () => receiver.requests.length >= 2, 10_000);
      expect(receiver.requests.map((r) => r.headers['webhook-id'])).toEqual([messageId, messageId]);
      // Nothing lost: the refused one stays parked in its row.
      expect((await waitsOf(harness)).filter((w) => w.merchant_id === 'm_poison_probe')).toEqual([written]);
    } finally {
      await harness.close();
      await receiver.close();
    }
  }, 60_000);
});

/** A parked wait behind the circuit of (merchant, endpoint 'ep_dead'), its bytes an empty object; the circuit's probe due in `probeInMs`. */
function parkedWait(merchantId: string, webhookId: string, probeInMs: number) {
  return { merchantId, webhookId, endpointId: 'ep_dead', hand: 0, attempt: 1, delayMs: 0, reason: 'retry' as const, headers: { [HEADERS.webhookId]: webhookId }, content: Buffer.from('{}'), spanLeftMs: 3_600_000, circuitMs: probeInMs };
}

describe("a parked wait whose probe PostgreSQL refuses, beside another open circuit's", () => {
  it("costs only its own circuit's probe: the other circuit's probe is handed back", async () => {
    const harness = await startHarness({ name: 'wait-poison-probes', merchants: [] });
    try {
      // Refused before it is written (its probe is due in 50 ms: a probe round may come before the
      // next statement), and written first: the probes' statement meets it first.
      await refuse(harness, 'UPDATE', 'm_poison_probe_a');
      await harness.waits.write([parkedWait('m_poison_probe_a', 'evt_refused', 50)], []);
      await harness.waits.write([parkedWait('m_poison_probe_b', 'evt_other', 50)], []);
      // As written: its update refused, it keeps its first hand (drawn at its insert, 0033).
      const [refused] = await waitsOf(harness);
      await waitFor("the other circuit's probe handed back", async () => {
        const [other] = await harness.database.query<{ parked: boolean }>("SELECT parked FROM webhook_waits WHERE merchant_id = 'm_poison_probe_b'");
        return !other || !other.parked;
      }, 10_000);
      // Nothing lost: the refused one stays parked in its row, its circuit open.
      expect((await waitsOf(harness)).filter((w) => w.merchant_id === 'm_poison_probe_a')).toEqual([refused]);
    } finally {
      await harness.close();
    }
  }, 60_000);
});

describe('a closing circuit whose parked wait PostgreSQL refuses to make due again, beside another closing circuit', () => {
  it("costs only its own circuit: the other's parked waits are made due and its row deleted", async () => {
    const harness = await startHarness({ name: 'wait-poison-unpark', merchants: [] });
    try {
      // Circuits open for an hour (no probe), the refused one written and closed first.
      await harness.waits.write([parkedWait('m_poison_unpark_a', 'evt_refused', 3_600_000)], []);
      await harness.waits.write([parkedWait('m_poison_unpark_b', 'evt_other', 3_600_000)], []);
      await refuse(harness, 'UPDATE', 'm_poison_unpark_a');
      await harness.waits.closeCircuits([{ merchantId: 'm_poison_unpark_a', endpointId: 'ep_dead' }]);
      await harness.waits.closeCircuits([{ merchantId: 'm_poison_unpark_b', endpointId: 'ep_dead' }]);
      await waitFor("the other circuit's row deleted, its wait no longer parked", async () =>
        (await harness.database.query("SELECT 1 FROM wait_circuits WHERE merchant_id = 'm_poison_unpark_b'")).length === 0
        && (await harness.database.query("SELECT 1 FROM webhook_waits WHERE merchant_id = 'm_poison_unpark_b' AND parked")).length === 0, 10_000);
      // Nothing lost: the refused one stays parked in its row, behind its closing row.
      expect(await harness.database.query("SELECT webhook_id, parked FROM webhook_waits WHERE merchant_id = 'm_poison_unpark_a'")).toEqual([{ webhook_id: 'evt_refused', parked: true }]);
      expect(await harness.database.query("SELECT closing FROM wait_circuits WHERE merchant_id = 'm_poison_unpark_a'")).toEqual([{ closing: true }]);
    } finally {
      await harness.close();
    }
  }, 60_000);
});

describe('a hand-back whose take PostgreSQL refuses, taken with others in one statement', () => {
  it('is refused alone: the hand-backs beside it are taken', async () => {
    const database = await createTestDatabase('wait_poison_take');
    const db = openPostgres(database.url, { maxConnections: 2 });
    try {
      const store = new WaitStore(db);
      const wait = (webhookId: string) => ({ merchantId: 'm_test', webhookId, hand: 0, attempt: 1, delayMs: 0, reason: 'retry' as const, headers: { [HEADERS.webhookId]: webhookId }, content: Buffer.from('{}'), spanLeftMs: 3_600_000 });
      await store.write([wait('evt_before'), wait('evt_refused'), wait('evt_after')], []);
      const { handed } = await store.pick(10, 60_000);
      expect(handed).toHaveLength(3);
      // Picked, then refused its takes (a rule on the column the take counts).
      await database.query(`CREATE FUNCTION refuse_take() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN IF NEW.webhook_id = 'evt_refused' AND NEW.takes <> OLD.takes THEN RAISE EXCEPTION 'this take is refused'; END IF; RETURN NEW; END $$`);
      await database.query('CREATE TRIGGER refuse_take BEFORE UPDATE ON webhook_waits FOR EACH ROW EXECUTE FUNCTION refuse_take()');
      const taker = new WaitTaker(store, 60_000);
      // In one turn: one statement.
      const outcomes = await Promise.allSettled(handed.map((h) => taker.take({ merchantId: h.merchantId, webhookId: h.webhookId, endpointId: h.endpointId, hand: h.hand })));
      expect(Object.fromEntries(handed.map((h, i) => [h.webhookId, outcomes[i]!.status === 'fulfilled' ? outcomes[i]!.value : (outcomes[i] as PromiseRejectedResult).reason.name])))
        .toEqual({ evt_before: 'taken', evt_refused: 'WriteRefusedError', evt_after: 'taken' });
    } finally {
      await db.close();
      await database.drop();
    }
  }, 30_000);
});
