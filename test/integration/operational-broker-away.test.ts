import type { ApiProgram } from '../../apps/api/program.js';
import { adminToken, call, startTestApi, waitReady } from '../support/api.js';
import { brokerUrl, TestBroker, uniquePrefix } from '../support/broker.js';
import { FrozenProxy } from '../support/frozen-proxy.js';
import { patchFirstEndpoint, putMerchantWithEndpoint } from '../support/merchant-endpoints.js';
import { DATABASE_DIRECTORY } from '../support/operational.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';

/**
 * An endpoint write is announced (endpoint.disabled, .enabled, ...) before it is answered: with
 * RabbitMQ away the write stands, and its answer comes once the publish has given up, within the
 * 10 s any publish waits for the broker (operating.md "When things break"), not after a minute.
 */
describe('an endpoint write while RabbitMQ does not answer', () => {
  const prefix = uniquePrefix('opsaway');
  let db: TestDatabase;
  let proxy: FrozenProxy;
  let api: ApiProgram;

  beforeAll(async () => {
    db = await createTestDatabase('opsaway');
    proxy = await FrozenProxy.start(brokerUrl());
    api = await waitReady(await startTestApi(prefix, [], {}, { ...DATABASE_DIRECTORY, DATABASE_URL: db.url, RABBITMQ_URL: proxy.url }));
  });

  afterAll(async () => {
    // The proxy closed first: the API's connection drops at once instead of its stop waiting on a frozen one.
    await proxy?.close();
    await api?.stop();
    const test = await TestBroker.open();
    await test.deleteTopology(prefix);
    await test.close();
    await db?.drop();
  });

  it('is saved and answered within about 10 s, its event given up on', async () => {
    const auth = { authorization: `Bearer ${await adminToken()}`, 'content-type': 'application/json' };
    expect((await putMerchantWithEndpoint(api, 'm_away', { publicKey: 'pk_away_0000001', url: 'http://127.0.0.1:9/away' }, auth)).status).toBe(201);
    proxy.freeze();
    const started = Date.now();
    const answer = await patchFirstEndpoint(api, 'm_away', { enabled: false }, auth);
    const took = Date.now() - started;
    expect({ status: answer.status, enabled: (answer.body as any).data?.enabled }).toEqual({ status: 200, enabled: false });
    expect(took).toBeLessThan(15_000);
    const stored = await db.query<{ endpoints: Array<{ enabled: boolean }> }>("SELECT endpoints FROM merchants WHERE id = 'm_away'");
    expect(stored[0]?.endpoints[0]?.enabled).toBe(false);
    expect((await call(api, '/admin/merchants/m_away', { method: 'GET', headers: auth })).status).toBe(200);
  }, 120_000);
});
