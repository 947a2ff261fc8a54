import { Webhook } from 'standardwebhooks';
import type { ApiProgram } from '../../apps/api/program.js';
import { sampleEvent } from '../../libs/contracts/index.js';
import { EventPublisher } from '../../libs/publisher/index.js';
import { type Answer, call } from '../support/api.js';
import { startPortalStack, type PortalStack } from '../support/portal.js';
import { Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

/**
 * Issue 47, "starve every merchant" and "fake money", through the real API, dispatcher,
 * PostgreSQL and RabbitMQ: a merchant's share of the dispatcher does not grow with its URLs, and
 * a test event says it is one inside the signed body, moves no money and is attempted once.
 */
describe("a merchant's share of the dispatcher, and its test events", () => {
  let stack: PortalStack;
  let api: ApiProgram;
  let publisher: EventPublisher;
  /** Answers 200 after 9.9 s, on every path: slow 200s never open a circuit. */
  let tarpit: Receiver;
  /** Answers at once: 500 under /fail, else 204. */
  let shop: Receiver;

  beforeAll(async () => {
    tarpit = await Receiver.start(() => ({ status: 200, delayMs: 9_900 }));
    shop = await Receiver.start((_n, req) => (req.path.endsWith('/fail') ? 500 : 204));
    // Two retries one second apart, 8 requests at once: each URL's bound and each merchant's is 4.
    stack = await startPortalStack('bulkhead', 1, {}, { DISPATCH_CONCURRENCY: '8', DELIVERY_TIMEOUT_MS: '15000', RETRY_SCHEDULE: '1s,1s' });
    api = stack.apis[0]!;
    publisher = new EventPublisher(stack.dispatcher.broker, stack.prefix);
  });

  afterAll(async () => {
    // The tarpit's held requests end first, so the dispatcher's drain does not wait 9.9 s for them.
    await tarpit?.close();
    await stack?.close();
    await shop?.close();
  });

  async function portal(merchantId: string) {
    const url = await stack.link(merchantId, { permissions: ['manage-endpoint'] });
    const token = /#token=([A-Za-z0-9_.-]+)$/.exec(url)![1]!;
    const session = await call(api, '/portal/api/session', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ token }) });
    expect(session.status).toBe(201);
    const cookie = session.headers.get('set-cookie')!.split(';')[0]!;
    const csrf = (session.body as { data: { csrfToken: string } }).data.csrfToken;
    return (method: string, path: string, body: unknown): Promise<Answer> =>
      call(api, path, { method, headers: { cookie, 'x-csrf-token': csrf, 'content-type': 'application/json' }, body: JSON.stringify(body) });
  }

  it("keeps another merchant's p95 delivery time under 2 s while a slow tarpit takes 40 test and upstream events on two URLs", async () => {
    await stack.putMerchant('m_tarpit', `${tarpit.url}/first`);
    await stack.putMerchant('m_victim', `${shop.url}/victim`);
    const hostile = await portal('m_tarpit');
    // The portal allows 10 test events a minute per merchant (shared by the replicas), so the
    // tarpit's load is 5 test events and 15 upstream events per URL: the attacker gets
    // ordinary events too, by making payments that upstream reports (here EventPublisher).
    const flood = async () => {
      for (let i = 0; i < 5; i++) expect((await hostile('POST', `${stack.endpoint('m_tarpit')}/test`, { event: 'payout' })).status).toBe(202);
      for (let i = 0; i < 15; i++) await publisher.publish(sampleEvent('payout', 'm_tarpit'));
    };
    await flood();
    await waitFor('the first URL holds its 4 slots', () => tarpit.held >= 4, 10_000);
    // Switch to a second URL: on a per-URL bound alone it would take another 4 slots, all 8.
    expect((await hostile('PATCH', stack.endpoint('m_tarpit'), { url: `${tarpit.url}/second` })).status).toBe(200);
    await waitFor('the dispatcher sends to the second URL', () => stack.dispatcher.merchants.byId('m_tarpit')?.endpoints[0]?.url.endsWith('/second'), 10_000);
    const deferredBefore = stack.dispatcher.dispatcher.stats.deferred;
    await flood();
    await waitFor(
      'the second URL taken, or its deliveries set aside',
      () => tarpit.requests.some((r) => r.path.endsWith('/second')) || stack.dispatcher.dispatcher.stats.deferred > deferredBefore,
      10_000,
    );

    // The other merchant's webhooks, spread over two seconds while the tarpit holds its requests.
    const sentAt = new Map<string, number>();
    for (let i = 0; i < 20; i++) {
      const message = sampleEvent('charge.completed', 'm_victim');
      sentAt.set(String(message.data.tnxRef), Date.now());
      await publisher.publish(message);
      await new Promise((resolve) => setTimeout(resolve, 100)); // pacing the load, not waiting for an outcome
    }
    const received = await shop.waitForRequests(20, 30_000);
    const latencies = received.map((r) => r.at - sentAt.get(JSON.parse(r.body).data.tnxRef)!).sort((a, b) => a - b);
    const p95 = latencies[Math.ceil(0.95 * latencies.length) - 1]!;
    expect(p95).toBeLessThan(2_000);
    // The tarpit never had more than the merchant's share (4 of 8) in flight at once.
    expect(stack.dispatcher.dispatcher.guards.merchantInFlight('m_tarpit')).toBeLessThanOrEqual(4);
  }, 60_000);

  it('sends a test event marked as a test inside the signed body, with zero amounts, attempted once and counted apart', async () => {
    const secret = await stack.putMerchant('m_probe', `${shop.url}/fail`);
    const merchant = await portal('m_probe');
    const sent = await merchant('POST', `${stack.endpoint('m_probe')}/test`, { event: 'charge.completed' });
    expect(sent.status).toBe(202);
    const { webhookId } = (sent.body as { data: { webhookId: string } }).data;
    // The schedule has two retries; a test event has none: failed after its one attempt.
    await stack.logged('m_probe', webhookId, 'failed', 15_000);
    const attempts = shop.requests.filter((r) => r.headers['webhook-id'] === webhookId);
    expect(attempts).toHaveLength(1);
    const [request] = attempts;
    new Webhook(secret).verify(request!.body, request!.headers as Record<string, string>);
    const { data } = JSON.parse(request!.body) as { data: Record<string, unknown> };
    expect(data).toMatchObject({ test: true, sourceAmount: 0, destinationAmount: 0 });
    expect(String(data.tnxRef)).toMatch(/^TEST-/);
    const metrics = await (await fetch(`http://127.0.0.1:${stack.dispatcher.metricsPort}/metrics`)).text();
    expect(metrics).toMatch(/^webhooks_test_deliveries_total\{(?=[^}]*outcome="failed")[^}]*\} 1$/m);
  }, 30_000);
});
