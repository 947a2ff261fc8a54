/**
 * @runs-alone stops and starts the shared broker's application (rabbitmqctl stop_app / start_app)
 */
import type { ApiProgram } from '../../apps/api/program.js';
import { BrokerConnection, BrokerUnavailableError } from '../../libs/broker/index.js';
import { sampleEvent } from '../../libs/contracts/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import type { Merchant } from '../../libs/merchants/index.js';
import { EventPublisher } from '../../libs/publisher/index.js';
import { call, startTestApi, token, unresolved } from '../support/api.js';
import { brokerUrl } from '../support/broker.js';
import { brokerControl } from '../support/broker-control.js';
import { type Harness, startHarness, testMerchant } from '../support/harness.js';
import { Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

const control = brokerControl();
const describeWithControl = control ? describe : describe.skip;
if (!control) console.warn('broker-restart tests skipped: the broker cannot be stopped from here (no local rabbitmqctl, no container)');

describeWithControl('RabbitMQ stopped and started under load', () => {
  let receiver: Receiver;
  let mode: 'fail' | 'ok' = 'fail';
  let harness: Harness;
  let api: ApiProgram;
  let upstream: BrokerConnection;
  let live: Merchant;
  let resendable: Merchant;

  beforeAll(async () => {
    receiver = await Receiver.start((_n, req) => (JSON.parse(req.body).data.flaky && mode === 'fail' ? 500 : 200));
    live = testMerchant('m_live', receiver.url);
    resendable = testMerchant('m_resend', receiver.url);
    harness = await startHarness({ name: 'restart', merchants: [live, resendable], retryDelaysMs: [] });
    api = await startTestApi(harness.prefix);
    upstream = new BrokerConnection({ url: brokerUrl(), name: 'test-upstream', logger: silentLogger(), publishWaitMs: 2_000 });
    await upstream.open(10_000);
  });

  afterAll(async () => {
    await upstream?.close();
    await api?.stop();
    await harness?.close();
    await receiver?.close();
  });

  it('loses no published event and no resend, and both programs are ready again', async () => {
    const headers = { 'x-auth-token': resendable.publicKey, authorization: `Bearer ${await token(resendable.id, { expiresIn: '10m' })}` };
    const failing = sampleEvent('payout', resendable.id);
    failing.data.flaky = true;
    await new EventPublisher(upstream, harness.prefix).publish(failing);
    const reference = String(failing.data.reference);
    await waitFor('failure indexed', async () => (await unresolved(api, resendable.id, reference)) === 1);

    // Upstream publishes 400 events, retrying what was not confirmed, as a publisher should.
    const publisher = new EventPublisher(upstream, harness.prefix);
    const confirmed = new Set<string>();
    let unconfirmed = 0;
    const publishing = (async () => {
      for (let i = 0; i < 400; i++) {
        const messageId = `evt_restart_${i}`;
        const message = sampleEvent('charge.completed', live.id);
        for (;;) {
          try {
            await publisher.publish(message, { messageId });
            confirmed.add(messageId);
            break;
          } catch (err) {
            if (!(err instanceof BrokerUnavailableError)) throw err;
            unconfirmed++;
            await new Promise((resolve) => setTimeout(resolve, 200));
          }
        }
        if (i % 20 === 0) await new Promise((resolve) => setTimeout(resolve, 50));
      }
    })();

    await waitFor('some delivered before the outage', () => receiver.requests.length > 60, 20_000);
    await control!.stop();
    let duringOutage;
    try {
      duringOutage = await call(api, `/nucleus/tnx/webhook?reference=${reference}`, { headers });
      expect((await call(api, '/readyz', { method: 'GET' })).status).toBe(503);
    } finally {
      await control!.start();
    }
    expect(duringOutage.status).toBe(503);
    expect(duringOutage.body).toMatchObject({ error: { code: 'service_unavailable' } });

    await publishing;
    await waitFor('dispatcher connected again', () => harness.broker.isConnected, 60_000, 100);
    await waitFor(
      'every confirmed event delivered',
      () => {
        const delivered = new Set(receiver.requests.map((r) => String(r.headers['webhook-id'])));
        return [...confirmed].every((id) => delivered.has(id));
      },
      60_000,
      100,
    );
    expect(confirmed.size).toBe(400);

    mode = 'ok';
    // The API reconnects on its own schedule, not the dispatcher's: a load balancer sends it resends once it is ready.
    await waitFor('the API ready again', async () => (await call(api, '/readyz', { method: 'GET' })).status === 200, 60_000, 100);
    const before = receiver.requests.length;
    const after = await call(api, `/nucleus/tnx/webhook?reference=${reference}`, { headers });
    expect({ status: after.status, body: after.body }).toMatchObject({ status: 200 });
    await receiver.waitForRequests(before + 1, 20_000);
    if (process.env.REPORT_LATENCY) {
      const unique = new Set(receiver.requests.map((r) => r.headers['webhook-id'])).size;
      console.log(JSON.stringify({ confirmed: confirmed.size, unconfirmedTries: unconfirmed, requests: receiver.requests.length, unique }));
    }
  });
});
