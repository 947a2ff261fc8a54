import { Webhook } from 'standardwebhooks';
import type { ApiProgram } from '../../apps/api/program.js';
import type { DispatcherProgram } from '../../apps/dispatcher/program.js';
import { sampleEvent } from '../../libs/contracts/index.js';
import { ENDPOINT_ID } from '../../libs/merchants/index.js';
import { EventPublisher } from '../../libs/publisher/index.js';
import { adminToken, type Answer, call, expectDocumented, seen, startTestApi, waitReady } from '../support/api.js';
import { TestBroker, uniquePrefix } from '../support/broker.js';
import { Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';
import { startDatabaseDispatcher, TEST_SECRETS_KEY } from '../support/dispatcher-program.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';

const prefix = uniquePrefix('endpoints-admin');
const ENV: Record<string, string | undefined> = { MERCHANTS_FILE: undefined, WEBHOOKS_DEV: 'true', ALLOW_PRIVATE_TARGETS: 'true', SECRETS_KEY: TEST_SECRETS_KEY };

/** The admin API's `/merchants/{id}/endpoints` (issue 56): a merchant's endpoints one at a time, on two replicas. */
describe("admin API: a merchant's endpoints", () => {
  let receiver: Receiver;
  let apiA: ApiProgram;
  let apiB: ApiProgram;
  let dispatcher: DispatcherProgram;
  let publisher: EventPublisher;
  let auth: Record<string, string>;
  let db: TestDatabase;

  beforeAll(async () => {
    db = await createTestDatabase('endpoints_admin');
    ENV.DATABASE_URL = db.url;
    receiver = await Receiver.start(() => 204);
    apiA = await waitReady(await startTestApi(prefix, '', {}, ENV));
    apiB = await waitReady(await startTestApi(prefix, '', {}, ENV));
    dispatcher = await startDatabaseDispatcher(prefix, db.url);
    publisher = new EventPublisher(dispatcher.broker, prefix);
    auth = { authorization: `Bearer ${await adminToken()}`, 'content-type': 'application/json' };
  });

  afterAll(async () => {
    await dispatcher?.stop();
    await apiA?.stop();
    await apiB?.stop();
    await receiver?.close();
    const test = await TestBroker.open();
    await test.deleteTopology(prefix);
    await test.close();
    await db?.drop();
  });

  const send = (api: ApiProgram, method: string, path: string, body?: unknown, headers: Record<string, string> = {}) =>
    call(api, `/admin/merchants/${path}`, { method, headers: { ...auth, ...headers }, body: body === undefined ? undefined : JSON.stringify(body) });
  const data = (answer: Answer) => (answer.body as { data: Record<string, any> }).data;
  const code = (answer: Answer) => [answer.status, (answer.body as { error: { code: string } | null }).error?.code];
  const verifies = (secret: string, request: { body: string; headers: Record<string, unknown> }) => {
    try {
      new Webhook(secret).verify(request.body, request.headers as Record<string, string>);
      return true;
    } catch {
      return false;
    }
  };
  async function delivered(merchantId: string) {
    const { messageId } = await publisher.publish(sampleEvent('payout', merchantId));
    return waitFor('webhook delivered', () => receiver.requests.find((r) => r.headers['webhook-id'] === messageId), 10_000);
  }

  it('adds an endpoint with its own id and secret, refuses one more than the limit naming it, and delivers to it signed with that secret', async () => {
    expect((await send(apiA, 'PUT', 'm_ep', { publicKey: 'pk_ep_000001' })).status).toBe(201);
    // Replica B learns of the merchant within a second (NOTIFY).
    const listed = await waitFor('replica B has the merchant', async () => {
      const answer = await send(apiB, 'GET', 'm_ep/endpoints');
      return answer.status === 200 && answer;
    }, 5_000);
    expect(data(listed)).toEqual({ endpoints: [] });
    const url = `${receiver.url}/m_ep/one`;
    const created = await send(apiA, 'POST', 'm_ep/endpoints', { url, description: 'orders', events: ['payout'] });
    expect(created.status).toBe(201);
    const endpoint = data(created);
    expect(endpoint).toMatchObject({ url, description: 'orders', enabled: true, events: ['payout'], disabledReason: null, secret: expect.stringMatching(/^whsec_/) });
    expect(endpoint.id).toMatch(ENDPOINT_ID);
    expect(created.headers.get('etag')).toMatch(/^"\d+"$/);

    // A URL the merchant already has is refused; a second endpoint is allowed now that events fan
    // out (MAX_ENDPOINTS_PER_MERCHANT), and removed again so that the rest acts on one.
    expect(code(await send(apiB, 'POST', 'm_ep/endpoints', { url }))).toEqual([409, 'endpoint_url_taken']);
    const more = await send(apiB, 'POST', 'm_ep/endpoints', { url: `${receiver.url}/m_ep/two` });
    expect(more.status).toBe(201);
    expect((await send(apiB, 'DELETE', `m_ep/endpoints/${data(more).id}`)).status).toBe(200);

    await waitFor('the dispatcher has the endpoint alone', () => dispatcher.merchants.byId('m_ep')?.endpoints.length === 1 && dispatcher.merchants.byId('m_ep')?.endpoints[0]?.id === endpoint.id, 5_000);
    const request = await delivered('m_ep');
    expect(request.path).toBe(new URL(url).pathname);
    expect(verifies(endpoint.secret, request)).toBe(true);
    const read = await waitFor('replica B sees it', async () => {
      const answer = await send(apiB, 'GET', `m_ep/endpoints/${endpoint.id}`);
      return answer.status === 200 && answer;
    }, 5_000);
    expect(data(read)).toEqual({ ...endpoint, secret: undefined, currentPerSecond: null, previousSecretExpiresAt: null, previousSecrets: [], failingSince: null, orderByReference: false, maxPerSecond: null, disabledAt: null });
    expect(data(read)).not.toHaveProperty('secret');
  });

  it('changes one endpoint only at the version If-Match names, rotates its secret, and deletes it so that nothing more is sent to it', async () => {
    await send(apiA, 'PUT', 'm_ep2', { publicKey: 'pk_ep_000002' });
    const created = await send(apiA, 'POST', 'm_ep2/endpoints', { url: `${receiver.url}/m_ep2` });
    const { id } = data(created);
    const version = created.headers.get('etag')!;
    expect(code(await send(apiB, 'PATCH', `m_ep2/endpoints/${id}`, { enabled: false }, { 'if-match': '"999"' }))).toEqual([412, 'precondition_failed']);
    const off = await send(apiB, 'PATCH', `m_ep2/endpoints/${id}`, { enabled: false }, { 'if-match': version });
    expect(off.status).toBe(200);
    expect(data(off)).toMatchObject({ id, enabled: false, disabledReason: 'manual' });

    const rotated = await send(apiA, 'POST', `m_ep2/endpoints/${id}/secret/rotate`, { graceSeconds: 0 });
    expect(rotated.status).toBe(200);
    const { secret } = data(rotated);
    expect(data(await send(apiA, 'PATCH', `m_ep2/endpoints/${id}`, { enabled: true }))).toMatchObject({ enabled: true, disabledReason: null });
    await waitFor('the dispatcher has the new secret', () => dispatcher.merchants.byId('m_ep2')?.endpoints[0]?.secret === secret, 5_000);
    expect(verifies(secret, await delivered('m_ep2'))).toBe(true);

    expect(data(await send(apiB, 'DELETE', `m_ep2/endpoints/${id}`))).toEqual({ deleted: id });
    expect(code(await send(apiA, 'DELETE', `m_ep2/endpoints/${id}`))).toEqual([404, 'endpoint_not_found']);
    await waitFor('the dispatcher no longer has it', () => dispatcher.merchants.byId('m_ep2')?.endpoints.length === 0, 5_000);
    const before = receiver.requests.length;
    const skipped = dispatcher.dispatcher.stats.skipped;
    const { messageId } = await publisher.publish(sampleEvent('payout', 'm_ep2'));
    await waitFor('the skip is counted', () => dispatcher.dispatcher.stats.skipped > skipped, 10_000);
    expect(receiver.requests.slice(before).some((r) => r.headers['webhook-id'] === messageId)).toBe(false);
  });

  it('answers 404 for an unknown merchant or endpoint and 400 for an id that is no endpoint id', async () => {
    expect(code(await send(apiA, 'GET', 'm_nobody/endpoints'))).toEqual([404, 'merchant_not_found']);
    expect(code(await send(apiA, 'POST', 'm_nobody/endpoints', { url: `${receiver.url}/x` }))).toEqual([404, 'merchant_not_found']);
    await send(apiA, 'PUT', 'm_ep3', { publicKey: 'pk_ep_000003' });
    expect(code(await send(apiA, 'GET', 'm_ep3/endpoints/ep_missing_1'))).toEqual([404, 'endpoint_not_found']);
    expect(code(await send(apiA, 'GET', 'm_ep3/endpoints/wh_1'))).toEqual([400, 'invalid_parameter']);
    expect(code(await send(apiA, 'POST', 'm_ep3/endpoints', { url: `${receiver.url}/x`, secret: 'whsec_AAAAAAAAAAAAAAAAAAAAAAAA' }))).toEqual([400, 'invalid_settings']);
  });

  it('documents every answer it gave in the OpenAPI file', () => {
    const statuses = expectDocumented(seen);
    for (const status of ['200', '201', '409']) expect(statuses).toContain(`/admin/merchants/{merchantId}/endpoints ${status}`);
    for (const status of ['200', '400', '404', '412']) expect(statuses).toContain(`/admin/merchants/{merchantId}/endpoints/{endpointId} ${status}`);
  });
});
