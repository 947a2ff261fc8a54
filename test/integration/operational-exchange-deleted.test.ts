import type { BrokerConnection } from '../../libs/broker/index.js';
import { sampleEvent } from '../../libs/contracts/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { enabledEvent, OperationalPublisher } from '../../libs/operational/index.js';
import { openTopologyBroker, topologyNames } from '../../libs/topology/index.js';
import { brokerUrl, uniquePrefix } from '../support/broker.js';
import { type DirectoryDispatchers, startDirectoryDispatchers } from '../support/directory-dispatchers.js';
import { testMerchant, testSecret } from '../support/harness.js';
import { Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

/**
 * An operator deletes `<prefix>.operational` (operating.md, "An operator deletes an exchange")
 * while the dispatchers deliver its events to OPERATIONAL_WEBHOOK_URL: its binding to `dispatch`
 * goes with it. When the API (or the CLI) is the first to publish to it, it declares its own
 * topology again, which has no such binding (only a dispatcher with the URL makes it), and the
 * dispatchers, whose publishes no longer fail, never heard of the deletion.
 */
describe('the operational exchange deleted under a dispatcher with OPERATIONAL_WEBHOOK_URL', () => {
  const prefix = uniquePrefix('opsgone');
  const names = topologyNames(prefix);
  let platform: Receiver;
  let setup: DirectoryDispatchers;
  let api: BrokerConnection;

  beforeAll(async () => {
    platform = await Receiver.start(() => 204);
    setup = await startDirectoryDispatchers({
      prefix,
      name: 'operational_gone',
      answer: () => 404,
      env: { OPERATIONAL_WEBHOOK_URL: `${platform.url}/ops`, OPERATIONAL_WEBHOOK_SECRET: testSecret() },
    });
    // A program that publishes operational events without binding them to dispatch: the API, the CLI.
    api = await openTopologyBroker({ url: brokerUrl(), name: 'test-operational-gone-api', logger: silentLogger(), topology: { prefix, failedRetention: '1D' } });
  });

  afterAll(async () => {
    await api?.close();
    await platform?.close();
    await setup?.close();
  });

  it("delivers the dispatcher's next events to the platform once the API declared the exchange again without the binding", async () => {
    const merchant = testMerchant('m_gone', `${setup.receiver.url}/m_gone`);
    const endpoint = merchant.endpoints[0]!;
    await setup.directory.update(merchant.id, () => merchant);
    await waitFor('the dispatcher to know m_gone', () => setup.dispatchers[0]!.merchants.byId(merchant.id), 15_000);
    await setup.test.channel.deleteExchange(names.operational);
    // An endpoint write at the API: refused (404), its topology declared again, published once more.
    const publisher = new OperationalPublisher(api, names.operational, silentLogger(), { deadlineMs: 10_000 });
    await publisher.publish(enabledEvent({ merchantId: merchant.id, endpointId: endpoint.id, url: endpoint.url, enabledAt: new Date().toISOString() }, new Date()));
    // The merchant's endpoint answers 404 to every attempt: message.attempt.failing, then .exhausted.
    const { messageId } = await setup.publisher.publish(sampleEvent('payout', merchant.id));
    const platformHeard = () => platform.requests.map((r) => JSON.parse(r.body) as { type: string; data: { webhookId?: string } }).filter((e) => e.data.webhookId === messageId).map((e) => e.type);
    await waitFor('the webhook to go to failed', () => setup.dispatchers[0]!.dispatcher.stats.failed > 0, 20_000);
    expect(await waitFor('message.attempt.exhausted at the platform', () => platformHeard().includes('message.attempt.exhausted') && platformHeard(), 15_000)).toEqual(
      expect.arrayContaining(['message.attempt.failing', 'message.attempt.exhausted']),
    );
  }, 60_000);
});
