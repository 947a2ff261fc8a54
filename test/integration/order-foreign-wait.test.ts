import { startHarness, testMerchant } from '../support/harness.js';
import { eventOf } from '../support/order.js';
import { Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

/**
 * Order per reference: a new copy of a webhook that already waits outside the order (a retry from
 * before its endpoint ordered, or a resend's retry) is carried by that wait and takes no place in
 * its reference's line. Seen failing when the step gave it a place: no walk of that webhook ever
 * ended the place (its wait's attempts are not ordered), and the refund behind it waited for ever.
 */
it('a copy of a webhook whose wait is outside the order takes no place: the refund published after it is delivered, the wait carries the copy', async () => {
  const receiver = await Receiver.start(() => 204);
  const merchant = testMerchant('m_order_foreign', receiver.url);
  merchant.endpoints[0]!.orderByReference = true;
  const harness = await startHarness({ name: 'order-foreign-wait', merchants: [merchant] });
  try {
    const charge = eventOf('charge.completed', merchant.id, 'TX-FOREIGN');
    // Its retry, written before the endpoint ordered: attempt 1 failed, the next in an hour.
    await harness.database.query(
      `WITH bodies AS (INSERT INTO webhook_bodies (merchant_id, webhook_id, endpoint_id, content) VALUES ($1, 'evt_foreign_1', $2, $3::bytea))
       INSERT INTO webhook_waits (merchant_id, webhook_id, endpoint_id, attempt, due_at, pick_at, reason, headers, span_ends_at)
       VALUES ($1, 'evt_foreign_1', $2, 1, now() + interval '1 hour', now() + interval '1 hour', 'retry',
         jsonb_build_object('x-merchant-id', $1::text, 'x-event', 'charge.completed', 'x-webhook-id', 'evt_foreign_1', 'x-attempts', 1, 'x-first-seen-at', now()::text, 'x-endpoint-id', $2::text),
         now() + interval '1 day')`,
      [merchant.id, merchant.endpoints[0]!.id, Buffer.from(JSON.stringify(charge))],
    );
    // Upstream publishes the charge again (past the intake window), then its refund.
    await harness.publisher.publish(charge, { messageId: 'evt_foreign_1' });
    await waitFor('the copy settled', () => harness.dispatcher.stats.ordered === 1, 10_000);
    await harness.publisher.publish(eventOf('refund.completed', merchant.id, 'TX-FOREIGN'), { messageId: 'evt_foreign_2' });
    await waitFor('the refund delivered', () => receiver.requests.some((r) => r.headers['webhook-id'] === 'evt_foreign_2'), 10_000).catch(async (err: unknown) => {
      const places = await harness.database.query('SELECT webhook_id, ended_at FROM webhook_order ORDER BY seq');
      throw new Error(`${(err as Error).message}; places: ${JSON.stringify(places)}`);
    });
    // The copy was not sent beside its wait, which still carries it, and holds no place.
    expect(receiver.requests.map((r) => r.headers['webhook-id'])).toEqual(['evt_foreign_2']);
    expect(await harness.database.query("SELECT reason, attempt FROM webhook_waits WHERE webhook_id = 'evt_foreign_1'")).toEqual([{ reason: 'retry', attempt: 1 }]);
    expect(await harness.database.query("SELECT webhook_id FROM webhook_order WHERE webhook_id = 'evt_foreign_1'")).toEqual([]);
  } finally {
    await harness.close();
    await receiver.close();
  }
}, 60_000);
