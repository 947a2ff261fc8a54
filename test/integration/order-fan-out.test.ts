import type { Merchant } from '../../libs/merchants/index.js';
import { EventPublisher } from '../../libs/publisher/index.js';
import { deleteTopologyOf, uniquePrefix } from '../support/broker.js';
import { startHarness, testMerchant, testSecret } from '../support/harness.js';
import { seedMerchants } from '../support/merchant-rows.js';
import { eventOf } from '../support/order.js';
import { createTestDatabase } from '../support/postgres.js';
import { dispatcherEnv, startProgram } from '../support/process.js';
import { type ReceivedRequest, Receiver } from '../support/receiver.js';
import { openUpstream } from '../support/spawned-dispatchers.js';
import { waitFor } from '../support/wait.js';

/**
 * Order per reference where it meets fan-out: a charge that goes to several endpoints and a refund
 * of its reference that goes to fewer take their places in the line of an endpoint they share in
 * the order the dispatcher took them. Each case has a prefix, database and receiver of its own.
 * Both were seen failing (every refund admitted before its charge on the shared endpoint) while a
 * fan-out's shares looked at the merchant's deletion once more than a lone endpoint's delivery.
 */

const ids = (requests: readonly ReceivedRequest[]) => requests.map((r) => String(r.headers['webhook-id']));

/** Two ordered endpoints: a takes every event, b charges alone (a charge is fanned out, its refund is not). */
function chargesFannedOut(id: string, url: string): Merchant {
  return testMerchant(id, url, {
    endpoints: [
      { id: `ep_${id}_a`, url: `${url}/a`, enabled: true, secret: testSecret(), orderByReference: true },
      { id: `ep_${id}_b`, url: `${url}/b`, enabled: true, secret: testSecret(), orderByReference: true, events: ['charge.completed'] },
    ],
  });
}

it.concurrent("a charge fanned out to two ordered endpoints and its refund for one of them alone, published back to back: the refund is admitted after the charge on the endpoint they share, and goes after it", async () => {
  const receiver = await Receiver.start(() => 204);
  const merchant = chargesFannedOut('m_ix_uneven', receiver.url);
  const harness = await startHarness({ name: 'order-ix-uneven', merchants: [merchant], retryDelaysMs: [300] });
  const at = (endpoint: 'a' | 'b') => receiver.requests.filter((r) => r.path.endsWith(`/${endpoint}`));
  try {
    const refs = Array.from({ length: 30 }, (_, i) => `IX-U${i}`);
    // Not awaited one by one: the pairs reach the dispatcher together, as a busy upstream's do.
    await Promise.all(refs.flatMap((ref) => [
      harness.publisher.publish(eventOf('charge.completed', merchant.id, ref), { messageId: `evt_${ref}_c` }),
      harness.publisher.publish(eventOf('refund.completed', merchant.id, ref), { messageId: `evt_${ref}_r` }),
    ]));
    await waitFor('every webhook delivered to a and every charge to b', () => at('a').length === 60 && at('b').length === 30, 15_000);
    const early = refs.filter((ref) => ids(at('a')).indexOf(`evt_${ref}_r`) < ids(at('a')).indexOf(`evt_${ref}_c`));
    expect(early).toEqual([]);
  } finally {
    await harness.close();
    await receiver.close();
  }
}, 30_000);

it.concurrent('the same, through a dispatcher program (its intake keys checked first): the refunds for one endpoint alone take their places after their charges fanned out', async () => {
  const prefix = uniquePrefix('order-ix-program');
  const database = await createTestDatabase('order_ix_program');
  const upstream = await openUpstream(prefix, 'order-ix-program');
  const receiver = await Receiver.start(() => 204);
  const merchant = chargesFannedOut('m_ix_program', receiver.url);
  await seedMerchants(database.url, [merchant]);
  const program = startProgram('dist/apps/dispatcher/main.js', dispatcherEnv(prefix, database.url, { RETRY_SCHEDULE: '300ms' }));
  const at = (endpoint: 'a' | 'b') => receiver.requests.filter((r) => r.path.endsWith(`/${endpoint}`));
  try {
    const publisher = new EventPublisher(upstream, prefix);
    const refs = Array.from({ length: 30 }, (_, i) => `IX-P${i}`);
    await Promise.all(refs.flatMap((ref) => [
      publisher.publish(eventOf('charge.completed', merchant.id, ref), { messageId: `evt_${ref}_c` }),
      publisher.publish(eventOf('refund.completed', merchant.id, ref), { messageId: `evt_${ref}_r` }),
    ]));
    await waitFor('every webhook delivered to a and every charge to b', () => at('a').length === 60 && at('b').length === 30, 30_000);
    const places = await database.query<{ webhook_id: string }>("SELECT webhook_id FROM webhook_order WHERE endpoint_id = 'ep_m_ix_program_a' ORDER BY seq");
    const order = places.map((p) => p.webhook_id);
    expect(refs.filter((ref) => order.indexOf(`evt_${ref}_r`) < order.indexOf(`evt_${ref}_c`))).toEqual([]);
    expect(refs.filter((ref) => ids(at('a')).indexOf(`evt_${ref}_r`) < ids(at('a')).indexOf(`evt_${ref}_c`))).toEqual([]);
  } finally {
    program.child.kill('SIGTERM');
    await program.finished;
    await receiver.close();
    await upstream.close();
    await deleteTopologyOf(prefix);
    await database.drop();
  }
}, 60_000);
