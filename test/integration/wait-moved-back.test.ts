import type { GetMessage } from 'amqplib';
import { copyHeaders, HEADERS, sampleEvent } from '../../libs/contracts/index.js';
import { WAIT_TAKE_LIMIT } from '../../libs/waits/index.js';
import { brokerUrl } from '../support/broker.js';
import { runCliInProcess } from '../support/cli.js';
import { type Harness, startHarness, testMerchant } from '../support/harness.js';
import { failOnceThenSucceed, Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

/**
 * A wait whose end PostgreSQL refused, taken past WAIT_TAKE_LIMIT, is `spent`: out of the pick, its
 * copy parked as wait-not-ended, nothing handing it back. Its copy moved back once the cause is
 * fixed is the webhook's one copy: it takes the row over or ends it, whatever its way back.
 */

const SCHEDULE = [60_000, 60_000, 60_000];

async function refuseWaitEnds(harness: Harness): Promise<void> {
  await harness.database.query(`CREATE FUNCTION refuse_wait_end() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN RAISE EXCEPTION 'waits are kept' USING ERRCODE = 'check_violation'; END $$`);
  await harness.database.query('CREATE TRIGGER refuse_wait_end BEFORE DELETE ON webhook_waits FOR EACH ROW EXECUTE FUNCTION refuse_wait_end()');
}

const waitOf = async (harness: Harness, webhookId: string) =>
  (await harness.database.query<{ takes: number; spent: boolean }>(
    `SELECT takes, pick_at IS NULL AND takes > ${WAIT_TAKE_LIMIT} AS spent FROM webhook_waits WHERE webhook_id = $1`, [webhookId]))[0];

/** Its wait's next take is the one past WAIT_TAKE_LIMIT (as after ten hand-backs with no outcome), made due now. */
async function lastTakeDue(harness: Harness, webhookId: string): Promise<void> {
  await harness.database.query('UPDATE webhook_waits SET takes = $2, due_at = now(), pick_at = now() WHERE webhook_id = $1', [webhookId, WAIT_TAKE_LIMIT]);
}

/** As `webhooks invalid requeue` moves it: body, messageId and headers, the x-invalid-* ones removed. */
async function moveBack(harness: Harness, parked: GetMessage): Promise<void> {
  await harness.test.publishRaw(harness.names.dispatch, parked.content, {
    messageId: parked.properties.messageId,
    contentType: 'application/json',
    headers: copyHeaders(parked.properties.headers, { from: 'parked', unpark: true, upstreamExchange: harness.names.events, dispatch: harness.names.dispatch }),
  });
}

/**
 * An ordered webhook's first attempt fails; its end refused, its next take (past WAIT_TAKE_LIMIT)
 * parks it as wait-not-ended, ending its place but not its wait; the next of its reference fails
 * and waits, its place open. Two hours later (its place's end forgotten: ORDER_ENDED_KEEP_MS) the
 * parked copy is moved back, `fixed` or not (the trigger dropped).
 */
async function spentBehindLater(harness: Harness, merchantId: string, fixed: boolean): Promise<{ first: string; second: string }> {
  const event = sampleEvent('payout', merchantId);
  const { messageId: first } = await harness.publisher.publish(event);
  await waitFor('its retry waiting', async () => (await waitOf(harness, first)) !== undefined, 10_000);
  await refuseWaitEnds(harness);
  await lastTakeDue(harness, first);
  const [parked] = await harness.test.drain(harness.names.invalid, 1, 10_000);
  expect(parked!.properties.headers?.[HEADERS.invalidCode]).toBe('wait-not-ended');
  expect(await waitOf(harness, first)).toMatchObject({ spent: true });
  const { messageId: second } = await harness.publisher.publish({ ...event });
  await waitFor("the next one's retry waiting", async () => (await waitOf(harness, second)) !== undefined, 10_000);
  if (fixed) await harness.database.query('DROP TRIGGER refuse_wait_end ON webhook_waits');
  await harness.database.query("UPDATE webhook_order SET ended_at = now() - interval '2 hours' WHERE webhook_id = $1", [first]);
  await moveBack(harness, parked!);
  return { first, second };
}

describe('an ordered webhook parked as wait-not-ended, its wait left spent, moved back more than ORDER_ENDED_KEEP_MS after its park behind a later one of its reference', () => {
  it('is released after that one and delivered (its spent wait ended first), and its line goes on', async () => {
    const receiver = await Receiver.start(failOnceThenSucceed());
    const merchant = testMerchant('m_spent_ordered', receiver.url);
    merchant.endpoints[0]!.orderByReference = true;
    const harness = await startHarness({ name: 'wait-spent-ordered', merchants: [merchant], retryDelaysMs: SCHEDULE });
    try {
      const { first, second } = await spentBehindLater(harness, merchant.id, true);
      await waitFor('the moved-back copy taken', async () => (await harness.test.messageCount(harness.names.dispatch)) === 0 && harness.dispatcher.unacked === 0, 10_000);
      expect(receiver.requests).toHaveLength(2);
      // The one before it delivered: it is next, and goes.
      await harness.database.query('UPDATE webhook_waits SET due_at = now(), pick_at = now() WHERE webhook_id = $1', [second]);
      await waitFor('both delivered, in order', () => receiver.requests.length >= 4, 10_000).catch(async (err: unknown) => {
        const rows = await harness.database.query('SELECT webhook_id, reason, hand, takes, pick_at FROM webhook_waits');
        const places = await harness.database.query('SELECT webhook_id, ended_at FROM webhook_order ORDER BY seq');
        throw new Error(`${(err as Error).message}: requests ${JSON.stringify(receiver.requests.map((r) => r.headers['webhook-id']))}, waits ${JSON.stringify(rows)}, places ${JSON.stringify(places)}`);
      });
      expect(receiver.requests.map((r) => r.headers['webhook-id'])).toEqual([first, second, second, first]);
      await waitFor('no wait left', async () => (await harness.database.query('SELECT 1 FROM webhook_waits')).length === 0, 5_000);
      expect(await harness.database.query('SELECT 1 FROM webhook_order WHERE ended_at IS NULL')).toHaveLength(0);
    } finally {
      await harness.close();
      await receiver.close();
    }
  }, 60_000);

  it('is parked again when its spent wait still cannot be ended, not acked as waiting on that row', async () => {
    const receiver = await Receiver.start(failOnceThenSucceed());
    const merchant = testMerchant('m_spent_ordered_refused', receiver.url);
    merchant.endpoints[0]!.orderByReference = true;
    const harness = await startHarness({ name: 'wait-spent-ordered-refused', merchants: [merchant], retryDelaysMs: SCHEDULE });
    try {
      const { first } = await spentBehindLater(harness, merchant.id, false);
      const [again] = await harness.test.drain(harness.names.invalid, 1, 10_000);
      expect(again!.properties.messageId).toBe(first);
      expect(again!.properties.headers?.[HEADERS.invalidCode]).toBe('internal-error');
      expect(String(again!.properties.headers?.[HEADERS.invalidReason])).toMatch(/waits are kept/);
      expect(await waitOf(harness, first)).toMatchObject({ spent: true });
      expect(receiver.requests).toHaveLength(2);
    } finally {
      await harness.close();
      await receiver.close();
    }
  }, 60_000);
});

/**
 * The broker parks a copy itself (dispatch's delivery limit: its dispatchers died holding it) with
 * no x-original-routing-key, which only the dispatcher's parks write: moved back, a copy of no wait
 * (no x-wait-hand) is not `movedBack`, and its delivery ends no spent row. A spent row has a copy
 * of its own in invalid all the same, parked by the very take that spent it (wait-not-ended, with
 * the routing key): that copy ends it (or takes it over) once moved back, as operating.md says.
 */
describe('a spent wait whose webhook has a copy the broker parked (delivery-limit) beside its own wait-not-ended copy', () => {
  it('is ended by its wait-not-ended copy once both are moved back with webhooks invalid requeue: nothing left', async () => {
    const receiver = await Receiver.start(failOnceThenSucceed());
    const merchant = testMerchant('m_spent_limit', receiver.url);
    // The moved-back copy's attempt must succeed: one timed out (2 s, the harness's, under a loaded CI host) takes the row over.
    const harness = await startHarness({ name: 'wait-spent-limit', merchants: [merchant], retryDelaysMs: SCHEDULE, paused: true, settings: { deliveryTimeoutMs: 15_000 } });
    const cli = (...args: string[]) => runCliInProcess({ RABBITMQ_URL: brokerUrl(), TOPOLOGY_PREFIX: harness.prefix }, args);
    try {
      const webhookId = 'evt_spent_limit';
      const body = Buffer.from(JSON.stringify(sampleEvent('payout', merchant.id)));
      // A copy returned to dispatch until its delivery limit, as when each dispatcher holding it dies.
      await harness.test.publishRaw(harness.names.dispatch, body, { messageId: webhookId });
      await harness.test.returnUntilParked(harness.names.dispatch, harness.names.invalid);
      // Another copy walks: its attempt fails, its wait is written and, its end refused, spent.
      await harness.startDispatcher();
      await harness.test.publishRaw(harness.names.dispatch, body, { messageId: webhookId });
      await waitFor('its retry waiting', async () => (await waitOf(harness, webhookId)) !== undefined, 10_000);
      await refuseWaitEnds(harness);
      await lastTakeDue(harness, webhookId);
      await waitFor('its wait-not-ended copy parked beside it', async () => (await harness.test.messageCount(harness.names.invalid)) === 2, 10_000);
      expect(await waitOf(harness, webhookId)).toMatchObject({ spent: true });
      await harness.database.query('DROP TRIGGER refuse_wait_end ON webhook_waits');
      expect((await cli('invalid', 'requeue', '--code', 'delivery-limit')).code).toBe(0);
      await receiver.waitForRequests(2, 10_000);
      await waitFor('the copy delivered and acked', () => harness.dispatcher.unacked === 0, 5_000);
      // Delivered, but not the row's: the row is its own parked copy's to end.
      expect(await waitOf(harness, webhookId)).toMatchObject({ spent: true });
      expect((await cli('invalid', 'requeue', '--code', 'wait-not-ended')).code).toBe(0);
      await waitFor('its row ended', async () => (await waitOf(harness, webhookId)) === undefined, 10_000);
      // At least once: each copy delivered (the same webhook-id), nothing left behind.
      expect(receiver.requests.map((r) => r.headers['webhook-id'])).toEqual([webhookId, webhookId, webhookId]);
      expect(await harness.database.query('SELECT 1 FROM webhook_bodies')).toHaveLength(0);
      expect(await harness.test.messageCount(harness.names.invalid)).toBe(0);
    } finally {
      await harness.close();
      await receiver.close();
    }
  }, 60_000);
});
