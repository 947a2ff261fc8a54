import type { ApiProgram } from '../../apps/api/program.js';
import { call, startTestApi } from '../support/api.js';
import { brokerUrl, TestBroker, uniquePrefix } from '../support/broker.js';
import { FrozenProxy } from '../support/frozen-proxy.js';
import { testMerchant } from '../support/harness.js';
import { openSession } from '../support/portal.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';

/**
 * The portal's test event while RabbitMQ stores publishes but confirms none (a memory or disk alarm
 * blocking publishers, without raising one on the shared broker): the page gets an answer in time.
 */
describe('a portal test event while the broker confirms nothing', () => {
  const prefix = uniquePrefix('portal-blocked');
  const merchant = testMerchant('m_blocked', 'http://127.0.0.1:9/hook');
  const endpointId = merchant.endpoints[0]!.id;
  let db: TestDatabase;
  let proxy: FrozenProxy;
  let api: ApiProgram;

  beforeAll(async () => {
    db = await createTestDatabase('portal_blocked');
    proxy = await FrozenProxy.start(brokerUrl());
    proxy.dropConfirms();
    api = await startTestApi(prefix, [merchant], {}, { RABBITMQ_URL: proxy.url, DATABASE_URL: db.url, DELIVERY_LOG: 'on' });
  });

  afterAll(async () => {
    await api?.stop();
    await proxy?.close();
    const test = await TestBroker.open();
    await test.deleteTopology(prefix);
    await test.close();
    await db?.drop();
  });

  it('answers 503 within seconds, saying the event may still be sent, instead of waiting for a confirm for good', async () => {
    const { cookie, csrf } = await openSession(api, merchant.id, { permissions: ['manage-endpoint'] });

    const started = Date.now();
    const answer = await Promise.race([
      call(api, `/portal/api/endpoints/${endpointId}/test`, {
        headers: { cookie, 'x-csrf-token': csrf, 'content-type': 'application/json' },
        body: JSON.stringify({ event: 'payout' }),
      }),
      new Promise<'still waiting'>((resolve) => setTimeout(() => resolve('still waiting'), 20_000).unref()),
    ]);
    expect(answer).not.toBe('still waiting');
    expect(Date.now() - started).toBeLessThan(15_000);
    expect(answer).toMatchObject({ status: 503, body: { message: expect.stringContaining('may still be sent'), error: { code: 'service_unavailable', status: 503 }, data: null } });
    expect((answer as { headers: Headers }).headers.get('retry-after')).toMatch(/^\d+$/);
  }, 60_000);
});
