import { HEADERS, sampleEvent } from '../../libs/contracts/index.js';
import { brokerUrl } from '../support/broker.js';
import { runCliInProcess } from '../support/cli.js';
import { startHarness, testMerchant } from '../support/harness.js';
import { Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

/**
 * What upstream publishes is never read for our bookkeeping headers (x-wait-hand, x-attempts, …):
 * intake ignores them on a message from the events exchange, and the dispatcher's own parks drop
 * them. The broker parks a copy itself (dispatch's delivery limit) with the headers it was
 * published with; `webhooks invalid requeue` moves it back through the default exchange, where
 * headers are ours. Moved back, such a copy must be upstream's event again, not a hand-back of a
 * wait it names (taken as stale: acked, never delivered) nor an event whose attempts are spent.
 */
/**
 * An event published on upstream's exchange with `headers`, returned until the broker parks it
 * (delivery-limit), listed twice (a listing puts each message back without the broker's x-death and
 * x-first-death-*, and its verdict must stay for `requeue --code` to match), then moved back: it
 * must be delivered as upstream's event.
 */
async function parkListRequeue(name: string, headers: (merchantId: string) => Record<string, unknown>): Promise<void> {
  const receiver = await Receiver.start(() => 200);
  const merchant = testMerchant(`m_${name.replace(/-/g, '_')}`, receiver.url);
  const harness = await startHarness({ name, merchants: [merchant], paused: true });
  const cli = (...args: string[]) => runCliInProcess({ RABBITMQ_URL: brokerUrl(), TOPOLOGY_PREFIX: harness.prefix }, args);
  try {
    const webhookId = `evt_${name.replace(/-/g, '_')}`;
    const channel = await harness.test.connection.createConfirmChannel();
    channel.publish(harness.names.events, 'payout', Buffer.from(JSON.stringify(sampleEvent('payout', merchant.id))), { persistent: true, messageId: webhookId, headers: headers(merchant.id) });
    await channel.waitForConfirms();
    await channel.close();
    await harness.test.returnUntilParked(harness.names.dispatch, harness.names.invalid);
    for (const pass of [1, 2]) {
      const listed = await cli('invalid', 'list', '--json');
      expect([pass, JSON.parse(listed.stdout)]).toEqual([pass, [expect.objectContaining({ code: 'delivery-limit', reason: expect.stringMatching(/^delivered 10 times/), messageId: webhookId })]]);
    }
    await harness.startDispatcher();
    expect((await cli('invalid', 'requeue', '--code', 'delivery-limit')).code).toBe(0);
    await waitFor('the moved-back copy delivered', () => receiver.requests.some((r) => r.headers['webhook-id'] === webhookId), 10_000).catch((err: Error) => {
      throw new Error(`${err.message}: stats ${JSON.stringify(harness.dispatcher.stats)}`);
    });
    await waitFor('acked', () => harness.dispatcher.unacked === 0, 5_000);
    expect(await harness.test.messageCount(harness.names.invalid)).toBe(0);
  } finally {
    await harness.close();
    await receiver.close();
  }
}

describe('an upstream event the broker parked (delivery-limit), moved back with webhooks invalid requeue', () => {
  it("is delivered as upstream's event: the bookkeeping headers upstream set are dropped", () =>
    parkListRequeue('limit-upstream', (merchantId) => ({ [HEADERS.waitHand]: 3, [HEADERS.merchantId]: merchantId, [HEADERS.attempts]: 99, 'x-upstream': 'billing' })), 60_000);

  // RabbitMQ 3.10 writes x-first-death-* only on a message with no x-death: one upstream republished
  // from a dead-letter queue of its own keeps upstream's, naming upstream's exchange and reason. The
  // broker's own park from dispatch is its x-death entry for dispatch.
  it("is delivered as upstream's event when upstream republished it from a dead-letter queue of its own (its x-death and x-first-death-*)", () =>
    parkListRequeue('limit-republished', (merchantId) => ({
      [HEADERS.waitHand]: 3, [HEADERS.merchantId]: merchantId, [HEADERS.attempts]: 99,
      'x-death': [{ count: 1, reason: 'expired', queue: 'billing.retry', exchange: 'billing.events', time: { '!': 'timestamp', value: 1_700_000_000 }, 'routing-keys': ['payout'] }],
      'x-first-death-exchange': 'billing.events', 'x-first-death-reason': 'expired', 'x-first-death-queue': 'billing.retry',
    })), 60_000);

  // Whatever x-invalid-* a message the broker parked carries was upstream's: ours never reach dispatch
  // (a copy moved back drops them), and the broker writes none.
  it('shows no verdict upstream wrote on an event the broker parked for its TTL, and keeps none as ours', async () => {
    const harness = await startHarness({ name: 'requeue-expired', merchants: [testMerchant('m_expired_upstream', 'http://127.0.0.1:9/')], paused: true });
    const cli = (...args: string[]) => runCliInProcess({ RABBITMQ_URL: brokerUrl(), TOPOLOGY_PREFIX: harness.prefix }, args);
    try {
      const webhookId = 'evt_expired_upstream';
      const forged = { [HEADERS.invalidCode]: 'unknown-merchant', [HEADERS.invalidReason]: 'forged by upstream', [HEADERS.invalidAt]: '2020-01-01T00:00:00.000Z' };
      const channel = await harness.test.connection.createConfirmChannel();
      channel.publish(harness.names.events, 'payout', Buffer.from(JSON.stringify(sampleEvent('payout', 'm_expired_upstream'))), { persistent: true, messageId: webhookId, expiration: '1', headers: forged });
      await channel.waitForConfirms();
      await channel.close();
      await waitFor('the broker parks it (expired)', async () => (await harness.test.messageCount(harness.names.invalid)) === 1, 10_000);
      for (const pass of [1, 2]) {
        const listed = JSON.parse((await cli('invalid', 'list', '--json')).stdout) as Array<{ code: string | null; reason: string | null; invalidAt: string | null; messageId: string }>;
        expect([pass, listed.map(({ code, reason, messageId }) => ({ code, reason, messageId }))]).toEqual([pass, [{ code: null, reason: null, messageId: webhookId }]]);
        expect(listed[0]!.invalidAt).not.toBe(forged[HEADERS.invalidAt]);
      }
      expect((await cli('invalid', 'requeue', '--code', 'unknown-merchant')).code).toBe(3);
    } finally {
      await harness.close();
    }
  }, 60_000);

  // A test event's x-endpoint-id is trusted from upstream's exchange as its test mark is (the portal
  // publishes it there): dropped with upstream's bookkeeping, the copy moved back went to every endpoint.
  it('moves a test event the broker parked back to its one endpoint, not to every endpoint of its merchant', async () => {
    const receiver = await Receiver.start(() => 200);
    const merchant = testMerchant('m_limit_test', `${receiver.url}/first`);
    const second = { ...merchant.endpoints[0]!, id: 'ep_m_limit_test_second', url: `${receiver.url}/second` };
    merchant.endpoints.push(second);
    const harness = await startHarness({ name: 'requeue-test-event', merchants: [merchant], paused: true });
    const cli = (...args: string[]) => runCliInProcess({ RABBITMQ_URL: brokerUrl(), TOPOLOGY_PREFIX: harness.prefix }, args);
    try {
      const { messageId } = await harness.publisher.publish(sampleEvent('payout', merchant.id), { test: true, endpointId: second.id });
      await harness.test.returnUntilParked(harness.names.dispatch, harness.names.invalid);
      await harness.startDispatcher();
      expect((await cli('invalid', 'requeue', '--code', 'delivery-limit')).code).toBe(0);
      await waitFor('the moved-back test event delivered', () => receiver.requests.some((r) => r.headers['webhook-id'] === messageId), 10_000);
      await waitFor('acked', async () => harness.dispatcher.unacked === 0 && (await harness.test.messageCount(harness.names.dispatch)) === 0, 5_000);
      expect(receiver.requests.filter((r) => r.headers['webhook-id'] === messageId).map((r) => r.path)).toEqual([new URL(second.url).pathname]);
    } finally {
      await harness.close();
      await receiver.close();
    }
  }, 60_000);
});
