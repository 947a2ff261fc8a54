import { HEADERS } from '../../libs/contracts/index.js';
import { WAIT_TAKE_LIMIT, type WaitPut, WaitStore, WaitTaker } from '../../libs/waits/index.js';
import { useTestDatabase } from '../support/postgres.js';

describe('taking hand-backs of waits to their attempts', () => {
  const postgres = useTestDatabase('wait_taker', { maxConnections: 2 });

  it('takes those of one turn in one statement, each current hand true and each stale copy false', async () => {
    let statements = 0;
    const store = new WaitStore({ query: (text, params) => (statements++, postgres.database.query(text, params)), transaction: (work) => postgres.database.transaction(work) });
    const ids = ['evt_take_1', 'evt_take_2', 'evt_take_3'];
    await store.write(
      ids.map((webhookId) => ({
        merchantId: 'm_take', webhookId, hand: 0, attempt: 1, delayMs: 0, reason: 'retry' as const, content: Buffer.from('{}'), spanLeftMs: 3_600_000,
        headers: { [HEADERS.attempts]: 1, [HEADERS.webhookId]: webhookId },
      })),
      [],
    );
    const written = (await postgres.database.query<{ hand: number }>("SELECT hand FROM webhook_waits WHERE webhook_id = 'evt_take_1'")).rows[0]!.hand;
    const { handed: picked } = await store.pick(10, 60_000);
    // Each a new hand, drawn after the one its row was written with (0033).
    expect(picked.map((w) => w.hand > written)).toEqual([true, true, true]);
    const taker = new WaitTaker(store, 60_000);
    statements = 0;
    const taken = await Promise.all([
      ...picked.map((w) => taker.take({ merchantId: w.merchantId, webhookId: w.webhookId, hand: w.hand })),
      // A stale copy: the hand before the pick.
      taker.take({ merchantId: 'm_take', webhookId: 'evt_take_1', hand: written }),
      // A wait that does not exist (ended).
      taker.take({ merchantId: 'm_take', webhookId: 'evt_gone', hand: 1 }),
    ]);
    expect(taken).toEqual(['taken', 'taken', 'taken', 'stale', 'stale']);
    expect(statements).toBe(1);
    // Each lease now runs from the take: the rows are not due again.
    expect((await store.pick(10, 60_000)).handed).toEqual([]);
    // A take of a later turn goes in a statement of its own, and still finds its hand.
    statements = 0;
    expect(await taker.take({ merchantId: 'm_take', webhookId: 'evt_take_2', hand: picked.find((w) => w.webhookId === 'evt_take_2')!.hand })).toBe('taken');
    expect(statements).toBe(1);
  });

  it('counts a hand-back once: its retake (the lease renewed after its slot waited) is not another take', async () => {
    const store = new WaitStore(postgres.database);
    await store.write(
      [{ merchantId: 'm_retake', webhookId: 'evt_retake', hand: 0, attempt: 1, delayMs: 0, reason: 'retry', content: Buffer.from('{}'), spanLeftMs: 3_600_000,
        headers: { [HEADERS.attempts]: 1, [HEADERS.webhookId]: 'evt_retake' } }],
      [],
    );
    const { handed } = await store.pick(10, 60_000, { only: [{ merchantId: 'm_retake', webhookId: 'evt_retake', endpointId: '' }] });
    const taker = new WaitTaker(store, 60_000);
    const hand = { merchantId: 'm_retake', webhookId: 'evt_retake', hand: handed[0]!.hand };
    // WAIT_TAKE_LIMIT hand-backs of one hand (its attempt killed its dispatcher each time), each retaken after waiting for a slot.
    const seen: string[] = [];
    for (let n = 0; n < WAIT_TAKE_LIMIT; n++) {
      seen.push(await taker.take(hand));
      seen.push(await taker.take({ ...hand, again: true }));
    }
    expect(seen.filter((took) => took !== 'taken')).toEqual([]);
    const { rows } = await postgres.database.query<{ takes: number }>('SELECT takes FROM webhook_waits WHERE webhook_id = $1', ['evt_retake']);
    expect(rows[0]!.takes).toBe(WAIT_TAKE_LIMIT);
    // The next hand-back is the one past the bound.
    expect(await taker.take(hand)).toBe('spent');
  });

  it('leaves a spent row (taken past WAIT_TAKE_LIMIT) to the copy moved back: its new wait takes the row over, its end deletes it; a live row is neither', async () => {
    const store = new WaitStore(postgres.database);
    const put = (webhookId: string, attempt: number): WaitPut => ({
      merchantId: 'm_spent', webhookId, hand: 0, attempt, delayMs: 0, reason: 'retry', content: Buffer.from('{}'), spanLeftMs: 3_600_000,
      headers: { [HEADERS.attempts]: attempt, [HEADERS.webhookId]: webhookId },
    });
    const [retried, ended, live] = ['evt_spent_retried', 'evt_spent_ended', 'evt_live'];
    await store.write([put(retried, 1), put(ended, 1), put(live, 1)], []);
    const { handed } = await store.pick(10, 60_000, { only: [retried, ended, live].map((webhookId) => ({ merchantId: 'm_spent', webhookId, endpointId: '' })) });
    const handOf = (webhookId: string) => handed.find((w) => w.webhookId === webhookId)!.hand;
    const takes = [retried, ended].map((webhookId) => ({ merchantId: 'm_spent', webhookId, hand: handOf(webhookId) }));
    for (let n = 0; n < WAIT_TAKE_LIMIT; n++) await store.take(takes, 60_000);
    expect([...(await store.take(takes, 60_000)).values()]).toEqual(['spent', 'spent']);
    const row = async (webhookId: string) =>
      (await postgres.database.query<{ hand: number; attempt: number; takes: number; picked: boolean }>(
        'SELECT hand, attempt, takes, pick_at IS NOT NULL AS picked FROM webhook_waits WHERE webhook_id = $1', [webhookId])).rows[0];
    // The copies moved back: one's attempt failed (a new wait of its key), the other's ended.
    await store.write([put(retried, 2), put(live, 2)], [{ merchantId: 'm_spent', webhookId: ended, hand: 0 }, { merchantId: 'm_spent', webhookId: live, hand: 0 }]);
    expect(await row(retried)).toEqual({ hand: expect.any(Number), attempt: 2, takes: 0, picked: true });
    expect((await row(retried))!.hand).toBeGreaterThan(handOf(retried));
    expect(await row(ended)).toBeUndefined();
    expect((await postgres.database.query('SELECT 1 FROM webhook_bodies WHERE webhook_id = $1', [ended])).rows).toHaveLength(0);
    // A live row is its own: a redelivered first attempt's wait and a moved-back copy's end leave it.
    expect(await row(live)).toEqual({ hand: handOf(live), attempt: 1, takes: 0, picked: true });
    // The spent hand's copies are stale now.
    expect(await store.take([{ merchantId: 'm_spent', webhookId: retried, hand: handOf(retried) }], 60_000)).toEqual(new Map());
  });
});
