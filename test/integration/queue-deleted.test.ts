import { BrokerConnection } from '../../libs/broker/index.js';
import { sampleEvent } from '../../libs/contracts/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { EventPublisher } from '../../libs/publisher/index.js';
import { openTopologyBroker, topologyNames } from '../../libs/topology/index.js';
import { call, indexFailure, startTestApi, token, unresolved } from '../support/api.js';
import { brokerUrl, TestBroker, uniquePrefix } from '../support/broker.js';
import { startHarness, testMerchant } from '../support/harness.js';
import { type PortalStack, startPortalStack } from '../support/portal.js';
import { Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

/**
 * An operator deletes `dispatch` while the API runs and no dispatcher is there to declare it again
 * (they are stopped, or crash-looping): what the API publishes to it must not fail for that. The
 * API declares its topology again, as a move does, and the copy waits in dispatch for a dispatcher.
 */
describe('dispatch deleted under a running API', () => {
  it('a resend declares dispatch again and its copy is stored there, where it answered 503 until a dispatcher came back', async () => {
    const receiver = await Receiver.start();
    const merchant = testMerchant('m_dispatch_gone', receiver.url);
    const harness = await startHarness({ name: 'dispatch-gone', merchants: [merchant], retryDelaysMs: [] });
    // No dispatcher: none to notice the deletion and declare dispatch again.
    await harness.dispatcher.stop();
    const api = await startTestApi(harness.prefix);
    try {
      const message = sampleEvent('payout', merchant.id);
      const reference = String(message.data.reference);
      await indexFailure(api, message, 'evt_dispatch_gone', reference, merchant.endpoints[0]!.id);
      await harness.test.channel.deleteQueue(harness.names.dispatch);
      const headers = { 'x-auth-token': merchant.publicKey, authorization: `Bearer ${await token(merchant.id)}` };
      const answer = await call(api, `/nucleus/tnx/webhook?reference=${reference}`, { method: 'POST', headers });
      expect([answer.status, answer.body]).toEqual([200, { message: `webhook sent for reference ${reference}`, error: null, data: null }]);
      expect(await harness.test.messageCount(harness.names.dispatch)).toBe(1);
      expect(await unresolved(api, merchant.id, reference)).toBe(0);
    } finally {
      await api.stop();
      await harness.close();
      await receiver.close();
    }
  }, 60_000);

  describe('the portal', () => {
    let stack: PortalStack;
    let receiver: Receiver;

    beforeAll(async () => {
      receiver = await Receiver.start();
      stack = await startPortalStack('dispatch-gone-portal');
    }, 90_000);

    afterAll(async () => {
      await stack?.close();
      await receiver?.close();
    });

    it('sends a test event (202), declaring dispatch again, where it answered 500', async () => {
      await stack.putMerchant('m_gone', receiver.url);
      const endpoint = stack.endpoint('m_gone');
      const browser = await stack.open('m_gone', { permissions: ['manage-endpoint'] });
      await stack.dispatcher.stop();
      const test = await TestBroker.open();
      try {
        await test.channel.deleteQueue(`${stack.prefix}.dispatch`);
        const answer = await stack.write(browser, 'POST', `${endpoint}/test`, { event: 'payout' });
        expect([answer.status, (answer.body as { error: unknown }).error]).toEqual([202, null]);
        expect(await test.messageCount(`${stack.prefix}.dispatch`)).toBe(1);
      } finally {
        await test.close();
      }
    }, 60_000);
  });
});

/**
 * An operator deletes an exchange the programs publish to: a publish to it is a channel error (404),
 * which closed the publish channel, and every publish after it, for as long as the program ran.
 */
describe('an exchange deleted under a running program', () => {
  it('is declared again after the first publish it refuses, so the next ones land, where every one failed', async () => {
    const prefix = uniquePrefix('exchange-gone');
    const names = topologyNames(prefix);
    const broker: BrokerConnection = await openTopologyBroker({ url: brokerUrl(), name: 'test-exchange-gone', logger: silentLogger(), topology: { prefix, failedRetention: '1D' } });
    const test = await TestBroker.open();
    try {
      const publisher = new EventPublisher(broker, prefix);
      await test.channel.deleteExchange(names.events);
      let refused = 0;
      await waitFor('a publish that lands', () => publisher.publish(sampleEvent('payout', 'm_1')).then(() => true, () => (refused++, false)), 10_000, 200);
      expect({ refused: refused <= 1, dispatch: await test.messageCount(names.dispatch) }).toEqual({ refused: true, dispatch: 1 });
    } finally {
      await broker.close();
      await test.deleteTopology(prefix);
      await test.close();
    }
  }, 30_000);
});
