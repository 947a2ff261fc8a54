import type { ApiProgram } from '../../apps/api/program.js';
import { adminToken, call, startTestApi } from '../support/api.js';
import { TestBroker, uniquePrefix } from '../support/broker.js';
import { testMerchant } from '../support/harness.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';

/** What the dashboard's backend may send when it asks for a portal link: a body that is no object mints nothing. */
describe('the portal link route, given a body that is no object', () => {
  const prefix = uniquePrefix('portal-link-body');
  const merchant = testMerchant('m_link', 'http://127.0.0.1:9/hook');
  let db: TestDatabase;
  let api: ApiProgram;

  beforeAll(async () => {
    db = await createTestDatabase('portal_link_body');
    api = await startTestApi(prefix, [merchant], {}, { DATABASE_URL: db.url, DELIVERY_LOG: 'on' });
  });

  afterAll(async () => {
    await api?.stop();
    const test = await TestBroker.open();
    await test.deleteTopology(prefix);
    await test.close();
    await db?.drop();
  });

  const mint = async (body?: string) =>
    call(api, `/admin/merchants/${merchant.id}/portal-sessions`, {
      headers: { authorization: `Bearer ${await adminToken()}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      body,
    });

  const links = () => db.query<{ permissions: string[] }>('SELECT permissions FROM portal_links ORDER BY created_at');

  it.each([['JSON null', 'null'], ['an array', '[]'], ['a string', '"1h"']])('answers 400 invalid_body for %s, as for any body that is no object, and mints no link', async (_name, body) => {
    const before = await links();
    const answer = await mint(body);
    expect({ status: answer.status, body: answer.body }).toEqual({ status: 400, body: { message: expect.any(String), error: { code: 'invalid_body', status: 400 }, data: null } });
    expect(await links()).toEqual(before);
  });

  it('mints a view-only link for no body at all, as the route says', async () => {
    const before = await links();
    const answer = await mint();
    expect(answer.status).toBe(201);
    expect(await links()).toEqual([...before, { permissions: [] }]);
  });
});
