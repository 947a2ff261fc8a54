import { Webhook } from 'standardwebhooks';
import type { ApiProgram } from '../../apps/api/program.js';
import { type DispatcherProgram, startDispatcher } from '../../apps/dispatcher/program.js';
import { HEADERS, PLATFORM_MERCHANT_ID, sampleEvent } from '../../libs/contracts/index.js';
import { DeliveryLogRecorder, openPostgres, type Database } from '../../libs/delivery-store/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { enabledEvent, type IdentifiedEvent, OperationalPublisher } from '../../libs/operational/index.js';
import { EventPublisher } from '../../libs/publisher/index.js';
import { adminToken, call, startTestApi, waitReady } from '../support/api.js';
import { brokerUrl, TestBroker, uniquePrefix } from '../support/broker.js';
import { runCliInProcess } from '../support/cli.js';
import { testSecret } from '../support/harness.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';
import { collect, DATABASE_DIRECTORY, dispatcherEnv, type Seen } from '../support/operational.js';
import { type Behaviour, Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';
import { putMerchantWithEndpoint } from '../support/merchant-endpoints.js';

/**
 * OPERATIONAL_WEBHOOK_URL is a platform endpoint the dispatcher knows from its config: the
 * operational exchange is bound to dispatch, and each event is delivered to it as a merchant's
 * webhook is, with RETRY_SCHEDULE's tiers, the endpoint's circuit, the delivery log and `failed`.
 */

/** A dispatcher whose merchants are in `db`, with the platform endpoint at `platform`. */
function startWithPlatform(prefix: string, db: TestDatabase, platform: Receiver, secret: string, env: Record<string, string> = {}): Promise<DispatcherProgram> {
  return startDispatcher(
    dispatcherEnv(prefix, { DATABASE_URL: db.url, OPERATIONAL_WEBHOOK_URL: `${platform.url}/ops`, OPERATIONAL_WEBHOOK_SECRET: secret, ...env }),
    silentLogger(),
  );
}

/** An event as the API or a dispatcher makes one, for a merchant of the test's. */
let made = 0;
function event(): IdentifiedEvent {
  const at = new Date(Date.UTC(2026, 10, 25, 10, 0, 0, made++)).toISOString();
  return enabledEvent({ merchantId: 'm_ops', endpointId: 'ep_m_ops_main', url: 'https://shop.example/hooks', enabledAt: at }, new Date());
}

describe('operational webhooks delivered through the dispatch path', () => {
  const prefix = uniquePrefix('opswh');
  const secret = testSecret();
  /** What the platform answers, by webhook-id (n: its nth request for that id, 0-based); 204 otherwise. */
  const platformAnswers = new Map<string, (n: number) => number>();
  const counts = new Map<string, number>();
  let platform: Receiver;
  let merchantServer: Receiver;
  let test: TestBroker;
  let db: TestDatabase;
  let database: Database;
  let api: ApiProgram;
  let dispatcher: DispatcherProgram;
  let recorder: DeliveryLogRecorder;
  let operational: OperationalPublisher;
  let auth: Record<string, string>;
  let events: Seen[];

  beforeAll(async () => {
    platform = await Receiver.start((_n, req) => {
      const id = String(req.headers['webhook-id']);
      const n = counts.get(id) ?? 0;
      counts.set(id, n + 1);
      return platformAnswers.get(id)?.(n) ?? 204;
    });
    merchantServer = await Receiver.start(() => 204);
    db = await createTestDatabase('operational_webhook');
    api = await waitReady(await startTestApi(prefix, [], {}, { ...DATABASE_DIRECTORY, DATABASE_URL: db.url, DELIVERY_LOG: 'on' }));
    test = await TestBroker.open();
    // In the loop test the platform endpoint fails for longer than ENDPOINT_DISABLE_AFTER, and any event it raised would go out at once.
    dispatcher = await startWithPlatform(prefix, db, platform, secret, { DELIVERY_LOG: 'on', ENDPOINT_DISABLE_AFTER: '1s', OPERATIONAL_EVENT_INTERVAL: '1ms' });
    // A platform service's own queue on the exchange: what it hears is what the exchange carries.
    events = await collect(test, prefix);
    database = openPostgres(db.url);
    recorder = new DeliveryLogRecorder(dispatcher.broker, database, silentLogger(), { prefix, retentionMs: 30 * 86_400_000, retryMs: 200 });
    await recorder.start();
    operational = new OperationalPublisher(dispatcher.broker, `${prefix}.operational`, silentLogger());
    auth = { authorization: `Bearer ${await adminToken()}` };
  });

  afterAll(async () => {
    await dispatcher?.stop();
    await recorder?.stop();
    await database?.close();
    await api?.stop();
    await platform?.close();
    await merchantServer?.close();
    await test?.channel.deleteQueue(`${prefix}.test-subscriber`).catch(() => {});
    await test?.deleteTopology(prefix);
    await test?.close();
    await db?.drop();
  });

  const requestsFor = (id: string) => platform.requests.filter((r) => r.headers['webhook-id'] === id);
  /** The platform's webhook as the delivery log shows it to an operator (admin API). */
  async function logged(id: string): Promise<{ status: string; attempts: number; records: Array<{ outcome: string }> } | undefined> {
    const answer = await call(api, `/admin/merchants/${PLATFORM_MERCHANT_ID}/webhooks/${id}`, { method: 'GET', headers: auth });
    return answer.status === 200 ? ((answer.body as { data: never }).data) : undefined;
  }

  it('POSTs an operational event to OPERATIONAL_WEBHOOK_URL, its body as published, its webhook-id the event id, signed with OPERATIONAL_WEBHOOK_SECRET, and logs it delivered', async () => {
    const sent = event();
    await operational.publish(sent);
    const [request] = await waitFor('the event at the platform', () => requestsFor(sent.id).length > 0 && requestsFor(sent.id), 10_000);
    expect(request!.path).toBe('/webhooks/ops');
    expect(request!.body).toBe(JSON.stringify(sent.event));
    expect(new Webhook(secret).verify(request!.body, request!.headers as Record<string, string>)).toEqual(JSON.parse(JSON.stringify(sent.event)));
    const entry = await waitFor('the delivery in the log', async () => (await logged(sent.id))?.status === 'delivered' && logged(sent.id), 10_000);
    expect(entry).toMatchObject({ webhookId: sent.id, event: 'endpoint.enabled', references: [], status: 'delivered', attempts: 1 });
  });

  it('retries an operational event the platform answered 500 through the retry tiers, the same body and webhook-id, and logs both attempts', async () => {
    const sent = event();
    platformAnswers.set(sent.id, (n) => (n === 0 ? 500 : 204));
    const before = dispatcher.dispatcher.stats.retried;
    await operational.publish(sent);
    const entry = await waitFor('delivered on its 2nd attempt, in the log', async () => {
      const found = await logged(sent.id);
      return found?.status === 'delivered' && found;
    }, 10_000);
    expect(entry.attempts).toBe(2);
    expect(entry.records.map((r) => r.outcome)).toEqual(['retrying', 'delivered']);
    expect(dispatcher.dispatcher.stats.retried).toBeGreaterThan(before);
    const requests = requestsFor(sent.id);
    expect(requests).toHaveLength(2);
    expect(requests[1]!.body).toBe(requests[0]!.body);
  });

  it('puts an operational event in failed after the last attempt of RETRY_SCHEDULE, the failure in its headers, and logs it failed', async () => {
    const sent = event();
    platformAnswers.set(sent.id, () => 500);
    await operational.publish(sent);
    const entries = await waitFor('its failure entry', async () => {
      const all = await test.readStream(`${prefix}.failed`, 1, 10_000);
      return all.find((e) => e.properties.headers?.[HEADERS.webhookId] === sent.id);
    }, 20_000);
    expect(entries.content.toString('utf8')).toBe(JSON.stringify(sent.event));
    expect(entries.properties.headers).toMatchObject({
      [HEADERS.merchantId]: PLATFORM_MERCHANT_ID,
      [HEADERS.event]: 'endpoint.enabled',
      [HEADERS.failedReason]: 'attempts-exhausted',
      [HEADERS.attempts]: 5,
      [HEADERS.lastStatus]: 500,
    });
    expect(requestsFor(sent.id)).toHaveLength(5);
    const entry = await waitFor('failed in the log', async () => {
      const found = await logged(sent.id);
      return found?.status === 'failed' && found;
    }, 10_000);
    expect(entry.attempts).toBe(5);
  });

  it("raises no operational event about the platform's own endpoint, however long it fails, and never disables it", async () => {
    // Failing for longer than ENDPOINT_DISABLE_AFTER (1 s), past a 4th attempt, attempts running out, its circuit open.
    const started = Date.now();
    const failing = [event(), event()];
    for (const sent of failing) platformAnswers.set(sent.id, () => 503);
    for (const sent of failing) await operational.publish(sent);
    await waitFor('both in the log as failed', async () => (await Promise.all(failing.map(async (s) => (await logged(s.id))?.status))).every((s) => s === 'failed'), 20_000);
    await waitFor('past ENDPOINT_DISABLE_AFTER', () => Date.now() - started > 1_500, 5_000, 100);
    // An event published now, and a merchant's webhook, must both go out; what the dispatcher
    // published before them is on the exchange before the marker is.
    const marker = event();
    await operational.publish(marker);
    await waitFor('the marker on the exchange', () => events.some((e) => e.messageId === marker.id), 10_000);
    await waitFor('the marker at the platform: the endpoint is still sent to', () => requestsFor(marker.id).length > 0, 40_000);
    expect(events.filter((e) => e.data.merchantId === PLATFORM_MERCHANT_ID)).toEqual([]);
    // Only what the test published reached the platform: nothing the platform's failures raised.
    const published = new Set(events.map((e) => e.messageId));
    expect(platform.requests.filter((r) => !published.has(String(r.headers['webhook-id'])))).toEqual([]);
    expect(dispatcher.merchants.byId(PLATFORM_MERCHANT_ID)).toBeUndefined();
  });

  it("never signs for the platform a body upstream published, even once an operator moves it back from invalid", async () => {
    // Shaped as an operational event, published to upstream's exchange: parked (no merchantId), then
    // moved back to dispatch by the documented `webhooks invalid requeue`, as a fix upstream is followed.
    const forged = event();
    const body = Buffer.from(JSON.stringify({ ...forged.event, type: 'endpoint.disabled', data: { ...forged.event.data, reason: 'failing' } }));
    await test.channel.publish(`${prefix}.events`, 'endpoint.disabled', body, { messageId: 'evt_forged_ops', persistent: true });
    await waitFor('parked', async () => (await test.messageCount(`${prefix}.invalid`)) === 1, 10_000);
    const requeued = await runCliInProcess({ RABBITMQ_URL: brokerUrl(), TOPOLOGY_PREFIX: prefix }, ['invalid', 'requeue', '--all']);
    expect(requeued).toMatchObject({ code: 0, stdout: expect.stringContaining('moved 1 message(s)') });
    await waitFor('parked again', async () => (await test.messageCount(`${prefix}.invalid`)) === 1 || requestsFor('evt_forged_ops').length > 0, 10_000);
    expect(requestsFor('evt_forged_ops')).toEqual([]);
    expect(await test.messageCount(`${prefix}.invalid`)).toBe(1);
  });

  it('refuses to create a merchant under the platform endpoint id, which no admin listing shows', async () => {
    const put = await call(api, `/admin/merchants/${PLATFORM_MERCHANT_ID}`, {
      method: 'PUT',
      headers: { ...auth, 'content-type': 'application/json' },
      body: JSON.stringify({ publicKey: 'pk_platform_0001' }),
    });
    expect(put.status).toBe(400);
    expect((put.body as { message: string }).message).toContain('reserved');
    expect((await call(api, `/admin/merchants/${PLATFORM_MERCHANT_ID}`, { method: 'GET', headers: auth })).status).toBe(404);
  });
});

describe('a down platform endpoint and the merchants', () => {
  const prefix = uniquePrefix('opswh-down');
  let platform: Receiver;
  let merchantServer: Receiver;
  let db: TestDatabase;
  let api: ApiProgram;
  let test: TestBroker;
  let dispatcher: DispatcherProgram;

  beforeAll(async () => {
    // The platform's server hangs: each attempt holds its request until DELIVERY_TIMEOUT_MS.
    platform = await Receiver.start((() => 'hang') as Behaviour);
    merchantServer = await Receiver.start(() => 204);
    db = await createTestDatabase('operational_webhook_down');
    api = await waitReady(await startTestApi(prefix, [], {}, { ...DATABASE_DIRECTORY, DATABASE_URL: db.url }));
    test = await TestBroker.open();
    dispatcher = await startWithPlatform(prefix, db, platform, testSecret(), { DISPATCH_CONCURRENCY: '4', DELIVERY_TIMEOUT_MS: '4000' });
  });

  afterAll(async () => {
    await dispatcher?.stop();
    await api?.stop();
    await platform?.close();
    await merchantServer?.close();
    await test?.deleteTopology(prefix);
    await test?.close();
    await db?.drop();
  });

  it("does not hold back merchants' webhooks while the platform endpoint hangs on every event", async () => {
    const auth = { authorization: `Bearer ${await adminToken()}`, 'content-type': 'application/json' };
    const created = await putMerchantWithEndpoint(api, 'm_alive', { publicKey: 'pk_opswh_alive_01', url: `${merchantServer.url}/alive` }, auth);
    expect(created.status).toBe(201);
    await waitFor('the dispatcher knows m_alive', () => dispatcher.merchants.byId('m_alive')?.endpoints[0], 5_000);
    // More operational events than the dispatcher has request slots (4), all to a hanging endpoint.
    const operational = new OperationalPublisher(dispatcher.broker, `${prefix}.operational`, silentLogger());
    for (let i = 0; i < 12; i++) await operational.publish(event());
    await waitFor('the platform holding requests', () => platform.requests.length >= 2, 5_000);
    const publisher = new EventPublisher(dispatcher.broker, prefix);
    const delays: number[] = [];
    for (let i = 0; i < 5; i++) {
      const at = Date.now();
      const { messageId } = await publisher.publish(sampleEvent('payout', 'm_alive'));
      await waitFor(`merchant webhook ${i}`, () => merchantServer.requests.some((r) => r.headers['webhook-id'] === messageId), 10_000, 10);
      delays.push(Date.now() - at);
    }
    // Each well within one platform attempt's timeout (4 s): the platform's requests never took the merchants' slots.
    expect(Math.max(...delays)).toBeLessThan(1_500);
  });
});
