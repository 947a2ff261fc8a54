import { Webhook } from 'standardwebhooks';
import type { ApiProgram } from '../../apps/api/program.js';
import { sampleEvent } from '../../libs/contracts/index.js';
import { adminReplicas, data, DATABASE_DIRECTORY, DEV_REPLICA } from '../support/admin-replicas.js';
import { patchFirstEndpoint, putMerchantWithEndpoint, rotateFirstEndpoint } from '../support/merchant-endpoints.js';
import { adminToken, type Answer, call, expectDocumented, seen, token } from '../support/api.js';
import { waitFor } from '../support/wait.js';

describe('merchant settings on the broker (admin API, live directory)', () => {
  /** Replica A in development mode, private targets allowed (it points merchants at the local receiver); replica B as in production: https only, address guard on. */
  const stack = adminReplicas('merchant-settings', DEV_REPLICA, DATABASE_DIRECTORY);
  let secret: string;

  const put = (api: ApiProgram, id: string, body: unknown, headers = stack.auth) =>
    call(api, `/admin/merchants/${id}`, { method: 'PUT', headers, body: JSON.stringify(body) });
  const get = (api: ApiProgram, id: string, headers = stack.auth) => call(api, `/admin/merchants/${id}`, { method: 'GET', headers });
  const rotate = (api: ApiProgram, id: string, body: unknown) => rotateFirstEndpoint(api, id, body, stack.auth);
  const patchEndpoint = (api: ApiProgram, id: string, body: unknown) => patchFirstEndpoint(api, id, body, stack.auth);
  const dispatcherSees = (id: string, check: (webhook: any) => boolean) =>
    waitFor(`stack.dispatcher applied ${id}'s settings`, () => check(stack.dispatcher.merchants.byId(id)?.endpoints[0]), 5_000);

  async function deliveredTo(merchantId: string, event: 'payout' | 'charge.completed' | 'refund.completed') {
    const { messageId } = await stack.publisher.publish(sampleEvent(event, merchantId));
    const request = await waitFor(`${event} delivered`, () => stack.receiver.requests.find((r) => r.headers['webhook-id'] === messageId), 10_000);
    return request;
  }

  it('creates a merchant and its endpoint, returning its secret once; the other replica and the dispatcher apply it without a restart', async () => {
    const created = await putMerchantWithEndpoint(stack.apiA, 'm_live', { publicKey: 'pk_live_0001', url: `${stack.receiver.url}/m_live` }, stack.auth);
    expect(created.status).toBe(201);
    secret = data(created).secret;
    expect(secret).toMatch(/^whsec_/);
    expect(data(created)).toMatchObject({ enabled: true, events: ['charge.completed', 'payout', 'refund.completed'] });
    const endpointId = data(created).id as string;

    const onB = await waitFor('replica B has it', async () => {
      const answer = await get(stack.apiB, 'm_live');
      return answer.status === 200 && data(answer).endpoints.length === 1 && answer;
    }, 5_000, 50);
    expect(JSON.stringify(onB.body)).not.toContain('whsec_');
    expect(data(onB)).toEqual({ id: 'm_live', publicKey: 'pk_live_0001', endpoints: [{ id: endpointId, description: null, url: `${stack.receiver.url}/m_live`, enabled: true, events: ['charge.completed', 'payout', 'refund.completed'], previousSecretExpiresAt: null, previousSecrets: [], disabledReason: null, disabledAt: null, failingSince: null, orderByReference: false, maxPerSecond: null, currentPerSecond: null }] });

    // A second PUT keeps the endpoint and its secret and shows no secret; one with the old single webhook is refused, naming it.
    const again = await put(stack.apiB, 'm_live', { publicKey: 'pk_live_0001' });
    expect(again.status).toBe(200);
    expect(JSON.stringify(again.body)).not.toContain('whsec_');
    expect(data(again).endpoints).toEqual([expect.objectContaining({ id: endpointId, url: `${stack.receiver.url}/m_live` })]);
    const old = await put(stack.apiB, 'm_live', { publicKey: 'pk_live_0001', webhook: { url: 'https://hooks.example.com/m_live', enabled: true } });
    expect(old.status).toBe(400);
    expect((old.body as { message: string }).message).toContain('unknown field webhook');
    expect((await patchEndpoint(stack.apiB, 'm_live', { url: 'https://hooks.example.com/m_live' })).status).toBe(200);
    const back = await patchEndpoint(stack.apiA, 'm_live', { url: `${stack.receiver.url}/m_live` });
    expect(back.status).toBe(200);
    await dispatcherSees('m_live', (w) => w?.url === `${stack.receiver.url}/m_live`);

    const request = await deliveredTo('m_live', 'payout');
    new Webhook(secret).verify(request.body, request.headers as Record<string, string>);
  });

  it('skips the next event once the webhook is disabled, and sends again once enabled', async () => {
    await patchEndpoint(stack.apiA, 'm_live', { enabled: false });
    await dispatcherSees('m_live', (w) => w?.enabled === false);
    const skipped = stack.dispatcher.dispatcher.stats.skipped;
    const { messageId } = await stack.publisher.publish(sampleEvent('payout', 'm_live'));
    await waitFor('event skipped', () => stack.dispatcher.dispatcher.stats.skipped === skipped + 1, 10_000);
    expect(stack.receiver.requests.some((r) => r.headers['webhook-id'] === messageId)).toBe(false);

    await patchEndpoint(stack.apiA, 'm_live', { enabled: true });
    await dispatcherSees('m_live', (w) => w?.enabled === true);
    await deliveredTo('m_live', 'payout');
  });

  it('sends only the events the webhook lists; the others are skipped and counted', async () => {
    await patchEndpoint(stack.apiA, 'm_live', { events: ['payout'] });
    await dispatcherSees('m_live', (w) => w?.events?.length === 1);
    const skipped = stack.dispatcher.dispatcher.stats.skipped;
    const { messageId } = await stack.publisher.publish(sampleEvent('charge.completed', 'm_live'));
    await waitFor('filtered event skipped', () => stack.dispatcher.dispatcher.stats.skipped === skipped + 1, 10_000);
    expect(stack.receiver.requests.some((r) => r.headers['webhook-id'] === messageId)).toBe(false);
    const payout = await deliveredTo('m_live', 'payout');
    expect(JSON.parse(payout.body).event).toBe('payout');
    await patchEndpoint(stack.apiA, 'm_live', { events: null });
    await dispatcherSees('m_live', (w) => w?.events === undefined);
  });

  it('signs with the old and the new secret during the rotation grace, then with the new one only', async () => {
    const rotated = await rotate(stack.apiB, 'm_live', { graceSeconds: 2 });
    expect(rotated.status).toBe(200);
    const { secret: newSecret, previousSecretExpiresAt } = data(rotated);
    expect(newSecret).toMatch(/^whsec_/);
    expect(newSecret).not.toBe(secret);
    // The other replica shows it once it has read the stream: a GET may lag by a few milliseconds
    // (docs/merchants.md), more on two busy cores (a full CI run once read it before the rotation).
    const onA = await waitFor('replica A shows the rotation', async () => {
      const shown = data(await get(stack.apiA, 'm_live')).endpoints[0].previousSecretExpiresAt;
      return shown !== null && shown;
    }, 5_000, 50);
    expect(onA).toBe(previousSecretExpiresAt);
    await dispatcherSees('m_live', (w) => w?.secret === newSecret);

    const during = await deliveredTo('m_live', 'refund.completed');
    expect(String(during.headers['webhook-signature']).split(' ')).toHaveLength(2);
    new Webhook(secret).verify(during.body, during.headers as Record<string, string>);
    new Webhook(newSecret).verify(during.body, during.headers as Record<string, string>);

    await waitFor('grace period over', () => Date.now() > Date.parse(previousSecretExpiresAt) + 10, 5_000, 50);
    const after = await deliveredTo('m_live', 'refund.completed');
    new Webhook(newSecret).verify(after.body, after.headers as Record<string, string>);
    expect(() => new Webhook(secret).verify(after.body, after.headers as Record<string, string>)).toThrow();
    expect(data(await get(stack.apiA, 'm_live')).endpoints[0].previousSecretExpiresAt).toBeNull();
    secret = newSecret;
  });

  it('lands two rotations made at once on two replicas one after the other, losing neither and stopping no secret', async () => {
    const [onA, onB] = await Promise.all([rotate(stack.apiA, 'm_live', { graceSeconds: 60 }), rotate(stack.apiB, 'm_live', { graceSeconds: 60 })]);
    expect([onA.status, onB.status]).toEqual([200, 200]);
    const secrets = [data(onA).secret as string, data(onB).secret as string];
    expect(secrets[0]).not.toBe(secrets[1]);
    // Whichever came second put the first in its grace, and kept the secret before both in its own.
    // 15 s, not 5: once, in a full run on two busy cores, the dispatcher's copy had not got there in 5 s.
    // The message says what it held, so a state that never comes (a secret lost) is told from a late one.
    const last = await waitFor('dispatcher applied both', () => {
      const webhook = stack.dispatcher.merchants.byId('m_live')?.endpoints[0];
      return webhook && secrets.includes(webhook.secret) && webhook.previousSecrets?.length === 2 && webhook;
    }, 15_000).catch((err: Error) => {
      const webhook = stack.dispatcher.merchants.byId('m_live')?.endpoints[0];
      const known = webhook && [webhook.secret, ...(webhook.previousSecrets ?? []).map((p) => p.secret)].map((s) => (s === secret ? 'before' : secrets.includes(s) ? 'new' : 'other'));
      throw new Error(`${err.message}; the dispatcher holds ${JSON.stringify(known)}`);
    });
    const request = await deliveredTo('m_live', 'payout');
    for (const s of [...secrets, secret]) new Webhook(s).verify(request.body, request.headers as Record<string, string>);
    expect(String(request.headers['webhook-signature']).split(' ')).toHaveLength(3);
    secret = last.secret;
  });

  it('loads the directory from PostgreSQL when a program restarts', async () => {
    await stack.restartB();
    const answer = await get(stack.apiB, 'm_live');
    expect(answer.status).toBe(200);
    expect(data(answer).endpoints[0].url).toBe(`${stack.receiver.url}/m_live`);
    // Its merchant auth works from the rebuilt directory too (the resend API's public key check).
    const resend = await call(stack.apiB, '/nucleus/tnx/webhook?reference=nothing-failed', {
      headers: { 'x-auth-token': 'pk_live_0001', authorization: `Bearer ${await token('m_live')}` },
    });
    expect(resend.status).toBe(404);
  });

  it('answers every bad admin request with its 4xx in the envelope, and never writes', async () => {
    const code = (answer: Answer) => [answer.status, (answer.body as { error: { code: string } }).error.code];
    const valid = { publicKey: 'pk_bad_0001' };

    expect(code(await call(stack.apiB, '/admin/merchants/m_x', { method: 'GET' }))).toEqual([401, 'missing_credentials']);
    expect(code(await get(stack.apiB, 'm_x', { authorization: 'Bearer not.a.token' }))).toEqual([401, 'invalid_credentials']);
    expect(code(await get(stack.apiB, 'm_x', { authorization: `Bearer ${await token('m_live')}` }))).toEqual([403, 'insufficient_scope']);
    expect(code(await get(stack.apiB, 'm_x', { authorization: `Bearer ${await adminToken('webhooks:read')}` }))).toEqual([403, 'insufficient_scope']);
    expect(code(await get(stack.apiB, 'm_x'))).toEqual([404, 'merchant_not_found']);
    expect(code(await get(stack.apiB, '-bad%20id'))).toEqual([400, 'invalid_merchant_id']);
    expect(code(await call(stack.apiB, '/admin/merchants/m_x', { method: 'PUT', headers: stack.auth, body: '{not json' }))).toEqual([400, 'invalid_body']);

    const invalid = async (body: unknown, field: string, api = stack.apiB) => {
      const answer = await put(api, 'm_bad', body);
      expect(code(answer)).toEqual([400, 'invalid_settings']);
      expect((answer.body as { message: string }).message).toContain(field);
    };
    await invalid({}, 'publicKey');
    await invalid({ ...valid, publicKey: 'short' }, 'publicKey');
    await invalid({ ...valid, extra: 1 }, 'unknown field extra');
    // The merchant's single webhook of 0.1.0's drafts is gone: named, never ignored.
    await invalid({ ...valid, webhook: { url: 'https://hooks.example.com/x', enabled: true } }, 'unknown field webhook; allowed: publicKey');
    await invalid({ ...valid, endpoints: [] }, 'unknown field endpoints');
    // An endpoint's fields are checked by its own route, on either replica.
    expect((await put(stack.apiB, 'm_urls', valid)).status).toBe(201);
    const endpoint = async (body: unknown, field: string, api = stack.apiB) => {
      const answer = await call(api, '/admin/merchants/m_urls/endpoints', { method: 'POST', headers: stack.auth, body: JSON.stringify(body) });
      expect(code(answer)).toEqual([400, 'invalid_settings']);
      expect((answer.body as { message: string }).message).toContain(field);
    };
    const url = 'https://hooks.example.com/x';
    await endpoint({ url, secret: 'whsec_AAAAAAAAAAAAAAAAAAAAAAAA' }, 'unknown field secret');
    await endpoint({ url, enabled: 'yes' }, 'enabled');
    await endpoint({ url, events: [] }, 'events');
    await endpoint({ url, events: ['payout', 'payout'] }, 'events');
    await endpoint({ url, events: ['charge.failed'] }, 'events');
    await endpoint({ url: 'not a url' }, 'url');
    await endpoint({ url: 'http://hooks.example.com/x' }, 'url must be an https URL');
    await endpoint({ url: 'https://user:pw@hooks.example.com/x' }, 'url must not carry credentials');
    // A fragment is never sent: with one, two endpoints of one merchant would POST to the same URL.
    await endpoint({ url: 'https://hooks.example.com/x#copy' }, 'url must not carry a fragment');
    await endpoint({ url: 'https://169.254.169.254/latest' }, 'url must not point to');
    await endpoint({ url: 'https://[::1]:8443/x' }, 'url must not point to');
    await endpoint({ url: 'ftp://hooks.example.com/x' }, 'url', stack.apiA);

    expect(code(await put(stack.apiB, 'm_other', { ...valid, publicKey: 'pk_live_0001' }))).toEqual([409, 'public_key_taken']);
    expect(code(await call(stack.apiB, '/admin/merchants/m_nobody/endpoints/ep_nobody_1/secret/rotate', { method: 'POST', headers: stack.auth, body: '{}' }))).toEqual([404, 'merchant_not_found']);
    expect(code(await rotate(stack.apiB, 'm_live', { graceSeconds: -1 }))).toEqual([400, 'invalid_settings']);
    expect(code(await rotate(stack.apiB, 'm_live', { graceSeconds: 1.5 }))).toEqual([400, 'invalid_settings']);
    expect(code(await call(stack.apiB, '/admin/merchants/m_live', { method: 'DELETE', headers: stack.auth }))).toEqual([405, 'method_not_allowed']);

    // The merchant-level rotation of the single webhook is gone: each endpoint rotates its own.
    expect((await call(stack.apiB, '/admin/merchants/m_live/webhook/secret/rotate', { method: 'POST', headers: stack.auth, body: '{}' })).status).toBe(404);

    for (const id of ['m_bad', 'm_other', 'm_nobody']) expect(stack.dispatcher.merchants.byId(id)).toBeUndefined();
  });

  it('documents every answer it gave in the OpenAPI file', () => {
    const statuses = expectDocumented(seen);
    for (const status of ['200', '201', '400', '401', '403', '404', '409']) expect(statuses).toContain(`/admin/merchants/{merchantId} ${status}`);
    for (const status of ['200', '400', '404']) expect(statuses).toContain(`/admin/merchants/{merchantId}/endpoints/{endpointId}/secret/rotate ${status}`);
  });
});
