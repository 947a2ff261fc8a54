import { HEADERS, sampleEvent } from '../../libs/contracts/index.js';
import { declareTopology, topologyNames } from '../../libs/topology/index.js';
import { brokerUrl, uniquePrefix } from '../support/broker.js';
import { runCliInProcess } from '../support/cli.js';
import { type DispatcherAndRecorder, startDispatcherAndRecorder } from '../support/dispatcher-and-recorder.js';
import { testMerchant } from '../support/harness.js';
import { seedMerchants, TEST_SECRETS_KEY } from '../support/merchant-rows.js';
import { Receiver, type ReceivedRequest } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

const deliveriesOf = (receiver: Receiver, webhookId: string): ReceivedRequest[] => receiver.requests.filter((r) => r.headers['webhook-id'] === webhookId);

/**
 * An upstream event the broker parked itself from dispatch (its delivery limit, a TTL) carries the
 * broker's x-death entry for dispatch, never our x-original-routing-key: `webhooks invalid list`
 * must show the routing key from that entry, and the copy `requeue` moves back must be checked as
 * a redelivery, as a moved-back copy of our own park is. And an x-death entry for dispatch that
 * upstream wrote itself (RabbitMQ 3.10 only counts it when it parks the message, keeping the
 * exchange it names) must not make upstream's bookkeeping headers trusted. Found by a review (2026-11-30); each case failed on the
 * code before its fix. One dispatcher as deployed (the intake check on) and the recorder.
 */
describe('upstream events the broker parked, listed and moved back with webhooks invalid', () => {
  const prefix = uniquePrefix('invalid-broker-park');
  const names = topologyNames(prefix);
  const merchant = testMerchant('m_bp', 'http://placeholder');
  let receiver: Receiver;
  let deployed: DispatcherAndRecorder;
  const cli = (...args: string[]) => runCliInProcess({ RABBITMQ_URL: brokerUrl(), TOPOLOGY_PREFIX: prefix }, args);
  const body = (reference: string) => Buffer.from(JSON.stringify({ ...sampleEvent('payout', merchant.id), data: { ...sampleEvent('payout', merchant.id).data, reference } }));

  // Headers of a wait handed back, as upstream might set them: trusted, the copy was taken as a stale hand-back (never sent).
  const bookkeeping = () => ({ [HEADERS.waitHand]: 3, [HEADERS.merchantId]: merchant.id, [HEADERS.attempts]: 99 });
  // The entry the broker writes when it parks one of our copies (published on the default exchange, by the queue's name).
  const forgedDeath = (reason: string) => [{ count: 0, reason, queue: names.dispatch, exchange: '', time: { '!': 'timestamp', value: 1_700_000_000 }, 'routing-keys': [names.dispatch] }];

  beforeAll(async () => {
    receiver = await Receiver.start(() => 204);
    merchant.endpoints[0]!.url = receiver.url;
    deployed = await startDispatcherAndRecorder({
      prefix,
      database: 'invalid_broker_park',
      dispatcherEnv: { SECRETS_KEY: TEST_SECRETS_KEY, RETRY_SCHEDULE: '200ms', DELIVERY_TIMEOUT_MS: '2000', ALLOW_PRIVATE_TARGETS: 'true', METRICS_PORT: '0' },
      // Parked by the broker before any dispatcher runs: one returned to its delivery limit, one whose TTL ran out.
      before: async ({ database, test, publish }) => {
        await seedMerchants(database.url, [merchant]);
        await declareTopology(() => test.connection.createChannel(), { prefix, failedRetention: '1D' });
        await publish('payout', body('PO-BP-REPEAT'), { messageId: 'evt_bp_repeat' });
        await test.returnUntilParked(names.dispatch, names.invalid, 1);
        await publish('payout', body('PO-BP-TTL'), { messageId: 'evt_bp_forged_ttl', expiration: '1', headers: { ...bookkeeping(), 'x-death': forgedDeath('expired') } });
        await waitFor('the broker parks it (expired)', async () => (await test.messageCount(names.invalid)) === 2, 10_000);
      },
    });
  }, 60_000);

  afterAll(async () => {
    await deployed?.close();
    await receiver?.close();
  });

  it("lists an upstream event the broker parked with the routing key it was published with (its x-death entry's), also once listed before", async () => {
    for (const pass of [1, 2]) {
      const listed = JSON.parse((await cli('invalid', 'list', '--json')).stdout) as Array<{ messageId: string; code: string | null; originalRoutingKey: string | null }>;
      expect([pass, listed.find((m) => m.messageId === 'evt_bp_repeat')]).toEqual([pass, expect.objectContaining({ code: 'delivery-limit', originalRoutingKey: 'payout' })]);
    }
  }, 30_000);

  it('checks the key of an upstream event the broker parked, moved back, as a redelivery: not sent again where it was delivered', async () => {
    // Upstream published it again meanwhile: delivered, and in the log (as a first copy delivered before its crash loop would be).
    await deployed.publish('payout', body('PO-BP-REPEAT'), { messageId: 'evt_bp_repeat' });
    await waitFor('the repeat delivered', () => deliveriesOf(receiver, 'evt_bp_repeat').length === 1, 10_000);
    await waitFor('in the log', async () => (await deployed.database.query("SELECT 1 FROM delivery_webhooks WHERE webhook_id = 'evt_bp_repeat'")).length === 1, 15_000);
    const duplicates = deployed.program.dispatcher.stats.duplicates;
    expect((await cli('invalid', 'requeue', '--code', 'delivery-limit')).code).toBe(0);
    await waitFor('the moved-back copy taken', () => deployed.program.dispatcher.stats.duplicates > duplicates || deliveriesOf(receiver, 'evt_bp_repeat').length > 1, 10_000);
    expect(deliveriesOf(receiver, 'evt_bp_repeat')).toHaveLength(1);
  }, 60_000);

  // Its TTL ran out before any dispatcher took it: the broker counted upstream's entry (reason expired), which names our default exchange.
  it("delivers as upstream's event one the broker parked for its TTL whose x-death entry for dispatch upstream wrote itself", async () => {
    expect((await cli('invalid', 'requeue', '--all')).code).toBe(0);
    await waitFor('the moved-back copy delivered', () => deliveriesOf(receiver, 'evt_bp_forged_ttl').length === 1, 10_000).catch((err: Error) => {
      throw new Error(`${err.message}: stats ${JSON.stringify(deployed.program.dispatcher.stats)}`);
    });
  }, 30_000);

  // Taken to its delivery limit, the broker would count that entry as it counts an expired one's: intake parks it first, without it.
  it('parks an upstream publish carrying an x-death entry for dispatch as upstream-x-death, without it; moved back, it is delivered as upstream\'s event', async () => {
    await deployed.publish('payout', body('PO-BP-LIMIT'), { messageId: 'evt_bp_forged_limit', headers: { ...bookkeeping(), 'x-death': forgedDeath('delivery_limit') } });
    const [parked] = await deployed.test.drain(names.invalid, 1, 10_000);
    expect({
      messageId: parked?.properties.messageId,
      code: parked?.properties.headers?.[HEADERS.invalidCode],
      death: parked?.properties.headers?.['x-death'],
      sent: deliveriesOf(receiver, 'evt_bp_forged_limit').length,
    }).toEqual({ messageId: 'evt_bp_forged_limit', code: 'upstream-x-death', death: undefined, sent: 0 });
    await deployed.test.publishRaw(names.invalid, parked!.content, parked!.properties);
    expect((await cli('invalid', 'requeue', '--code', 'upstream-x-death')).code).toBe(0);
    await waitFor('the moved-back copy delivered', () => deliveriesOf(receiver, 'evt_bp_forged_limit').length === 1, 10_000).catch((err: Error) => {
      throw new Error(`${err.message}: stats ${JSON.stringify(deployed.program.dispatcher.stats)}`);
    });
  }, 30_000);
});
