import { sampleEvent } from '../../libs/contracts/index.js';
import type { Endpoint } from '../../libs/merchants/index.js';
import { uniquePrefix } from '../support/broker.js';
import { type DirectoryDispatchers, startDirectoryDispatchers } from '../support/directory-dispatchers.js';
import { testSecret } from '../support/harness.js';
import { waitFor } from '../support/wait.js';

/**
 * A merchant with twenty endpoints, every one hanging (a hostile merchant, or one whose server is
 * gone), beside another merchant: each endpoint is a share of its own, so between them they may take
 * every request slot of the dispatcher. A slot freed while the process is full goes to the oldest
 * waiting delivery of an endpoint whose last answer did not fail: the other merchant's webhooks wait
 * for the hanging endpoints' first requests (twenty endpoints over eight slots: three timeouts), not
 * until their circuits open. Seen failing with the slot by age alone: every one arrived 40 s late
 * (five timeouts for each of the twenty, eight at a time, all queued ahead of it).
 */
it("keeps another merchant's webhooks going while a merchant's twenty endpoints all hang", async () => {
  const setup: DirectoryDispatchers = await startDirectoryDispatchers({
    prefix: uniquePrefix('fanhang'),
    name: 'fan_out_hanging',
    answer: (_n, req) => (req.path.includes('/hanging/') ? 'hang' : 204),
    env: { RETRY_SCHEDULE: '5s,5s', DISPATCH_CONCURRENCY: '8', DELIVERY_TIMEOUT_MS: '3000' },
  });
  const { directory, publisher, receiver } = setup;
  try {
    const hanging: Endpoint[] = Array.from({ length: 20 }, (_, i) => ({ id: `ep_hanging_${i}`, url: `${receiver.url}/hanging/${i}`, enabled: true, secret: testSecret() }));
    await directory.update('m_hanging', () => ({ id: 'm_hanging', publicKey: 'pk_hanging_0001', endpoints: hanging }));
    await directory.update('m_other', () => ({ id: 'm_other', publicKey: 'pk_other_00001', endpoints: [{ id: 'ep_other', url: `${receiver.url}/other`, enabled: true, secret: testSecret() }] }));
    const dispatcher = setup.dispatchers[0]!;
    await waitFor('the dispatcher knows both', () => dispatcher.merchants.byId('m_hanging')?.endpoints.length === 20 && dispatcher.merchants.byId('m_other') !== undefined, 5_000);
    // Ten events, two hundred deliveries: the process's line is full of them.
    for (let i = 0; i < 10; i++) await publisher.publish(sampleEvent('payout', 'm_hanging'));
    await waitFor('every request slot hanging', () => dispatcher.dispatcher.guards.inFlight === 8, 5_000);
    const sentAt = new Map<string, number>();
    for (let i = 0; i < 20; i++) {
      sentAt.set((await publisher.publish(sampleEvent('payout', 'm_other'))).messageId, Date.now());
      await new Promise((resolve) => setTimeout(resolve, 100)); // pacing the other merchant's traffic
    }
    const other = () => receiver.requests.filter((r) => r.path.endsWith('/other'));
    await waitFor("the other merchant's webhooks", () => other().length >= 20, 60_000);
    const latencies = other().map((r) => r.at - sentAt.get(String(r.headers['webhook-id']))!).sort((a, b) => a - b);
    // Three timeouts and the load of a shared machine; not the forty seconds of every circuit opening.
    expect(latencies.at(-1)).toBeLessThan(20_000);
  } finally {
    await setup.close();
  }
}, 90_000);
