import { request } from 'node:http';
import { connect } from 'node:net';
import { Webhook } from 'standardwebhooks';
import { openApiDocument } from '../../apps/api/openapi.js';
import { loadApiConfig } from '../../apps/api/config.js';
import { type ApiProgram, startApi } from '../../apps/api/program.js';
import { HEADERS, sampleEvent } from '../../libs/contracts/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import type { Merchant } from '../../libs/merchants/index.js';
import { adminToken, type Answer, call, expectDocumented, JWT_SECRET, seen, startTestApi, token, unresolved, waitReady } from '../support/api.js';
import { brokerUrl } from '../support/broker.js';
import { TEST_SECRETS_KEY } from '../support/dispatcher-program.js';
import { type Harness, startHarness, testMerchant } from '../support/harness.js';
import { createTestDatabase } from '../support/postgres.js';
import { freePort, Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

const RESEND = '/nucleus/tnx/webhook';
const EMPTY_NAME = 'A query parameter has an empty name (as in "&=value"); remove it';

describe('the resend API', () => {
  let mode: 'fail' | 'ok' = 'fail';
  let receiver: Receiver;
  let harness: Harness;
  let api: ApiProgram;
  let alice: Merchant;
  let bob: Merchant;
  let carol: Merchant;
  let dave: Merchant;

  beforeAll(async () => {
    receiver = await Receiver.start(() => (mode === 'fail' ? 500 : 200));
    alice = testMerchant('m_alice', receiver.url);
    bob = testMerchant('m_bob', receiver.url);
    carol = testMerchant('m_carol', receiver.url);
    dave = testMerchant('m_dave', receiver.url);
    harness = await startHarness({ name: 'api', merchants: [alice, bob, carol, dave], retryDelaysMs: [] });
    api = await waitReady(await startTestApi(harness.prefix));
  });

  afterAll(async () => {
    await api?.stop();
    await harness?.close();
    await receiver?.close();
  });

  beforeEach(() => {
    mode = 'fail';
  });

  async function headersFor(merchant: Merchant, sub = merchant.id): Promise<Record<string, string>> {
    return { 'x-auth-token': merchant.publicKey, authorization: `Bearer ${await token(sub)}`, 'content-type': 'application/json' };
  }

  /** Publishes an event that fails its single attempt and waits until the API's index has it. */
  async function failedEvent(event: 'charge.completed' | 'payout' | 'refund.completed', merchant: Merchant, on: ApiProgram = api) {
    const message = sampleEvent(event, merchant.id);
    const { messageId } = await harness.publisher.publish(message);
    const reference = String(message.data.tnxRef ?? message.data.reference ?? message.data.refundRef);
    const ref = event === 'refund.completed' ? String(message.data.refundRef) : reference;
    await waitFor(`failure of ${ref} indexed`, async () => (await unresolved(on, merchant.id, ref)) > 0);
    return { message, messageId, reference: ref };
  }

  it('answers 200 in the spec envelope and delivers the webhook again with its webhook-id and a fresh signature', async () => {
    const { message, messageId, reference } = await failedEvent('charge.completed', alice);
    const before = receiver.requests.length;
    mode = 'ok';

    const answer = await call(api, `${RESEND}?reference=${reference}`, { headers: await headersFor(alice) });

    expect(answer.status).toBe(200);
    expect(answer.body).toEqual({ message: `webhook sent for reference ${reference}`, error: null, data: null });
    const requests = await receiver.waitForRequests(before + 1);
    const resent = requests[before]!;
    expect(resent.headers['webhook-id']).toBe(messageId);
    expect(resent.body).toBe(JSON.stringify({ event: 'charge.completed', data: message.data }));
    new Webhook(alice.endpoints[0]!.secret).verify(resent.body, resent.headers as Record<string, string>);
    expect(await unresolved(api, alice.id, reference)).toBe(0);

    const again = await call(api, `${RESEND}?reference=${reference}`, { headers: await headersFor(alice) });
    expect(again.status).toBe(404);
    expect(again.body).toEqual({ message: 'No failed webhook for this reference', error: { code: 'not_found', status: 404 }, data: null });
  });

  it('lets a webhook that fails again return to the failed queue and be resent again', async () => {
    const { messageId, reference } = await failedEvent('payout', alice);
    const first = await call(api, `${RESEND}?reference=${reference}`, { headers: await headersFor(alice) });
    expect(first.status).toBe(200);
    // The resent delivery fails (mode is still 'fail') and comes back as a new failure entry.
    await waitFor('failed again', async () => (await unresolved(api, alice.id, reference)) === 1);
    const entries = await harness.test.readStream(harness.names.failed, 1);
    const latest = entries.filter((e) => e.properties.headers?.[HEADERS.reference] === reference && e.properties.headers?.[HEADERS.entryType] === 'failure');
    expect(latest).toHaveLength(2);
    expect(latest[1]!.properties.messageId).toBe(messageId);
    expect(latest[1]!.properties.headers![HEADERS.attempts]).toBe(1);

    mode = 'ok';
    const before = receiver.requests.length;
    const second = await call(api, `${RESEND}?reference=${reference}`, { headers: await headersFor(alice) });
    expect(second.status).toBe(200);
    const [delivered] = (await receiver.waitForRequests(before + 1)).slice(before);
    expect(delivered!.headers['webhook-id']).toBe(messageId);
  });

  it('finds a refund by its refundRef or by its tnxRef', async () => {
    const byRefund = await failedEvent('refund.completed', alice);
    const byTnx = await failedEvent('refund.completed', alice);
    const tnxRef = String(byTnx.message.data.tnxRef);
    mode = 'ok';

    expect((await call(api, `${RESEND}?reference=${byRefund.reference}`, { headers: await headersFor(alice) })).status).toBe(200);
    expect((await call(api, `${RESEND}?reference=${tnxRef}`, { headers: await headersFor(alice) })).status).toBe(200);
    // Resolved under both of its references.
    expect(await unresolved(api, alice.id, String(byRefund.message.data.tnxRef))).toBe(0);
    expect(await unresolved(api, alice.id, byTnx.reference)).toBe(0);
  });

  it("answers a reference holding a line separator (U+2028) with the 200 its OpenAPI document describes", async () => {
    // The service takes any reference but control characters; a regex's "." stops at U+2028 and U+2029.
    const message = sampleEvent('charge.completed', alice.id);
    const reference = `line\u2028sep\u2029${String(message.data.tnxRef)}`;
    message.data.tnxRef = reference;
    await harness.publisher.publish(message);
    await waitFor('failure indexed', async () => (await unresolved(api, alice.id, reference)) > 0);
    mode = 'ok';
    const answer = await call(api, `${RESEND}?reference=${encodeURIComponent(reference)}`, { headers: await headersFor(alice) });
    expect(answer.body).toEqual({ message: `webhook sent for reference ${reference}`, error: null, data: null });
    expectDocumented([{ path: RESEND, method: 'post', ...answer }]);
  });

  it("answers 404 for another merchant's reference and leaves it failed", async () => {
    const { reference } = await failedEvent('charge.completed', alice);
    const answer = await call(api, `${RESEND}?reference=${reference}`, { headers: await headersFor(bob) });
    expect(answer.status).toBe(404);
    expect(answer.body).toEqual({ message: 'No failed webhook for this reference', error: { code: 'not_found', status: 404 }, data: null });
    expect(await unresolved(api, alice.id, reference)).toBe(1);
  });

  it('answers 403 when the token and the public key name different merchants', async () => {
    const answer = await call(api, `${RESEND}?reference=abc`, { headers: await headersFor(alice, bob.id) });
    expect(answer.status).toBe(403);
    expect(answer.body).toEqual({
      message: 'The access token and the public key belong to different merchants',
      error: { code: 'merchant_mismatch', status: 403 },
      data: null,
    });
  });

  it.each([
    ['no reference', '', 'missing_reference', 'The reference query parameter is required'],
    ['an empty reference', '?reference=', 'missing_reference', 'The reference query parameter is required'],
    ['a repeated reference', '?reference=a&reference=b', 'invalid_reference', 'Give the reference query parameter once'],
    ['a reference over 200 characters', `?reference=${'a'.repeat(201)}`, 'invalid_reference', 'The reference must be 1 to 200 characters without control characters or a lone surrogate'],
    ['a reference with a control character', '?reference=a%00b', 'invalid_reference', 'The reference must be 1 to 200 characters without control characters or a lone surrogate'],
    ['an unknown parameter', '?reference=a&merchant=m_bob', 'unknown_parameter', 'Unknown query parameter: merchant'],
    ['a bracketed parameter', '?reference[x]=a', 'unknown_parameter', 'Unknown query parameter: reference[x]'],
    ['a parameter with an empty name', '?reference=a&=b', 'unknown_parameter', EMPTY_NAME],
  ])('answers 400 for %s', async (_name, query, code, message) => {
    const answer = await call(api, `${RESEND}${query}`, { headers: await headersFor(alice) });
    expect(answer.status).toBe(400);
    expect(answer.body).toEqual({ message, error: { code, status: 400 }, data: null });
  });

  it('answers 400 unknown_parameter naming an empty parameter name on a route whose query mount.ts reads', async () => {
    const answer = await call(api, '/nucleus/webhooks/evt_1/resend?=b', { headers: await headersFor(alice) });
    expect(answer.body).toEqual({ message: EMPTY_NAME, error: { code: 'unknown_parameter', status: 400 }, data: null });
  });

  // The router decodes a path parameter before any handler runs: its URIError must get the route's own code.
  it.each(['%E0%A4%A', '%zz', '%'])('answers 400 invalid_parameter for a webhookId with malformed percent-encoding (%s), as the OpenAPI document says', async (webhookId) => {
    const answer = await call(api, `/nucleus/webhooks/${webhookId}/resend`, { headers: await headersFor(alice) });
    expect(answer.body).toEqual({
      message: 'The webhookId path segment is not valid: malformed percent-encoding',
      error: { code: 'invalid_parameter', status: 400 },
      data: null,
    });
  });

  it('answers 400 invalid_merchant_id for a merchantId with malformed percent-encoding, as for any malformed merchantId', async () => {
    const answer = await call(api, '/admin/merchants/%E0%A4%A', { method: 'GET', headers: { authorization: `Bearer ${await adminToken()}` } });
    expect(answer.status).toBe(400);
    expect(answer.body).toMatchObject({ error: { code: 'invalid_merchant_id', status: 400 }, data: null });
  });

  it('answers 400 for a JSON content type with a body that is not JSON', async () => {
    const answer = await call(api, `${RESEND}?reference=abc`, { headers: await headersFor(alice), body: '{not json' });
    expect(answer.status).toBe(400);
    expect(answer.body).toEqual({ message: 'The request body is not valid JSON', error: { code: 'invalid_body', status: 400 }, data: null });
  });

  it('answers 413 for a body over 16 KiB', async () => {
    const answer = await call(api, `${RESEND}?reference=abc`, { headers: await headersFor(alice), body: JSON.stringify({ x: 'y'.repeat(20_000) }) });
    expect(answer.status).toBe(413);
    expect(answer.body).toEqual({ message: 'The request body is too large', error: { code: 'body_too_large', status: 413 }, data: null });
  });

  const invalid = { message: 'The public key or the access token is not valid', error: { code: 'invalid_credentials', status: 401 }, data: null };
  const missing = {
    message: 'x-auth-token and Authorization: Bearer <token> are both required',
    error: { code: 'missing_credentials', status: 401 },
    data: null,
  };
  it.each([
    ['no x-auth-token', async () => ({ authorization: `Bearer ${await token('m_alice')}` }), missing],
    ['no Authorization', async () => ({ 'x-auth-token': alice.publicKey }), missing],
    ['an unknown public key', async () => ({ 'x-auth-token': 'pk_test_unknown_key', authorization: `Bearer ${await token('m_alice')}` }), invalid],
    ['a Basic scheme', async () => ({ 'x-auth-token': alice.publicKey, authorization: 'Basic dXNlcjpwYXNz' }), invalid],
    ['a token signed with another secret', async () => ({ 'x-auth-token': alice.publicKey, authorization: `Bearer ${await token('m_alice', { secret: 'another-secret-that-is-long-enough-000000' })}` }), invalid],
    ['an unsigned token (alg none)', async () => {
      const b64 = (o: object) => Buffer.from(JSON.stringify(o)).toString('base64url');
      const none = `${b64({ alg: 'none' })}.${b64({ sub: 'm_alice', exp: Math.floor(Date.now() / 1000) + 60 })}.`;
      return { 'x-auth-token': alice.publicKey, authorization: `Bearer ${none}` };
    }, invalid],
    ['an expired token', async () => ({ 'x-auth-token': alice.publicKey, authorization: `Bearer ${await token('m_alice', { expiresIn: Math.floor(Date.now() / 1000) - 60 })}` }),
      { message: 'The access token has expired', error: { code: 'token_expired', status: 401 }, data: null }],
  ])('answers 401 for %s', async (_name, headers, body) => {
    const answer = await call(api, `${RESEND}?reference=abc`, { headers: await headers() });
    expect(answer.status).toBe(401);
    expect(answer.headers.get('www-authenticate')).toBe('Bearer');
    expect(answer.body).toEqual(body);
  });

  it('takes the Bearer scheme in any case, as HTTP auth schemes are (RFC 9110 section 11.1)', async () => {
    for (const scheme of ['bearer', 'BEARER']) {
      const answer = await call(api, `${RESEND}?reference=nothing-failed`, { headers: { 'x-auth-token': alice.publicKey, authorization: `${scheme} ${await token(alice.id)}` } });
      expect({ scheme, status: answer.status }).toEqual({ scheme, status: 404 });
    }
  });

  it("checks exp and nbf with 5 seconds' leeway, as resending.md says", async () => {
    const now = Math.floor(Date.now() / 1000);
    const statusWith = async (options: Parameters<typeof token>[1]) =>
      (await call(api, `${RESEND}?reference=nothing-failed`, { headers: { 'x-auth-token': alice.publicKey, authorization: `Bearer ${await token(alice.id, options)}` } })).status;
    expect([await statusWith({ expiresIn: now - 2 }), await statusWith({ expiresIn: now - 30 })]).toEqual([404, 401]);
    expect([await statusWith({ notBefore: now + 2 }), await statusWith({ notBefore: now + 30 })]).toEqual([404, 401]);
  });

  it('answers 431 in the envelope for huge headers, without reaching the app', async () => {
    const answer = await call(api, `${RESEND}?reference=abc`, { headers: { ...(await headersFor(alice)), 'x-filler': 'x'.repeat(20_000) } });
    expect(answer.status).toBe(431);
    expect(answer.body).toEqual({ message: 'Request headers are too large', error: { code: 'header_too_large', status: 431 }, data: null });
  });

  it('answers 404 for an unknown route and 405 for GET on the resend path, with security headers and no stack', async () => {
    const route = await call(api, '/nope', { method: 'GET' });
    expect(route.status).toBe(404);
    expect(route.body).toEqual({ message: 'No such endpoint', error: { code: 'route_not_found', status: 404 }, data: null });
    const method = await call(api, `${RESEND}?reference=abc`, { method: 'GET' });
    expect(method.status).toBe(405);
    expect(method.headers.get('allow')).toBe('POST');
    expect(method.headers.get('x-content-type-options')).toBe('nosniff');
    expect(method.headers.get('x-powered-by')).toBeNull();
  });

  it('reports liveness and readiness', async () => {
    expect((await call(api, '/healthz', { method: 'GET' })).body).toEqual({ status: 'ok' });
    const ready = await call(api, '/readyz', { method: 'GET' });
    expect(ready.status).toBe(200);
    expect(ready.body).toMatchObject({ status: 'ready', broker: 'connected' });
  });

  it('rate limits each merchant on its own with 429 and Retry-After', async () => {
    // Merchants of its own: the count is PostgreSQL's, shared by every API on the database, and the
    // others' resends below would meet the refusals of this one's limit.
    const limited = await startTestApi(harness.prefix, [], { rateLimit: { perMinute: 1, burst: 2 } });
    try {
      for (let i = 0; i < 2; i++) expect((await call(limited, `${RESEND}?reference=nothing`, { headers: await headersFor(carol) })).status).toBe(404);
      const answer = await call(limited, `${RESEND}?reference=nothing`, { headers: await headersFor(carol) });
      expect(answer.status).toBe(429);
      expect(Number(answer.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
      expect(answer.body).toEqual({ message: 'Too many resend requests; try again later', error: { code: 'rate_limited', status: 429 }, data: null });
      expect((await call(limited, `${RESEND}?reference=nothing`, { headers: await headersFor(dave) })).status).toBe(404);
    } finally {
      await limited.stop();
    }
  });

  it('shows a resend made by one API instance to another: one failure index', async () => {
    const other = await startTestApi(harness.prefix);
    try {
      const { reference } = await failedEvent('payout', bob, other);
      await waitFor('first API indexed it too', async () => (await unresolved(api, bob.id, reference)) === 1);
      mode = 'ok';
      expect((await call(api, `${RESEND}?reference=${reference}`, { headers: await headersFor(bob) })).status).toBe(200);
      expect(await unresolved(other, bob.id, reference)).toBe(0);
      expect((await call(other, `${RESEND}?reference=${reference}`, { headers: await headersFor(bob) })).status).toBe(404);
    } finally {
      await other.stop();
    }
  });

  it('keeps the failure index across a restart: unresolved failures there, resent ones not', async () => {
    const pending = await failedEvent('charge.completed', bob);
    const resolved = await failedEvent('charge.completed', bob);
    mode = 'ok';
    expect((await call(api, `${RESEND}?reference=${resolved.reference}`, { headers: await headersFor(bob) })).status).toBe(200);

    await api.stop();
    // Ready once it has loaded the merchants (and the broker): the failure index is what it finds there.
    api = await waitReady(await startTestApi(harness.prefix));

    expect(await unresolved(api, bob.id, pending.reference)).toBe(1);
    expect(await unresolved(api, bob.id, resolved.reference)).toBe(0);
    expect((await call(api, `${RESEND}?reference=${pending.reference}`, { headers: await headersFor(bob) })).status).toBe(200);
  });

  it('answers 503 and reports not ready when its broker connection is gone', async () => {
    const cut = await startTestApi(harness.prefix);
    try {
      await cut.broker.close();
      const answer = await call(cut, `${RESEND}?reference=anything`, { headers: await headersFor(alice) });
      expect(answer.status).toBe(503);
      expect(answer.headers.get('retry-after')).toBe('5');
      expect(answer.body).toEqual({
        message: 'The message broker is unavailable; try again shortly',
        error: { code: 'service_unavailable', status: 503 },
        data: null,
      });
      const ready = await call(cut, '/readyz', { method: 'GET' });
      expect(ready.status).toBe(503);
      expect(ready.body).toMatchObject({ status: 'not ready', broker: 'disconnected' });
    } finally {
      await cut.stop();
    }
  });

  it('on stop answers the request in flight with Connection: close and takes no other on that connection', async () => {
    const leaving = await waitReady(await startTestApi(harness.prefix));
    const socket = connect(leaving.port, '127.0.0.1');
    let received = '';
    socket.on('data', (chunk: Buffer) => (received += chunk.toString('latin1')));
    const closed = new Promise<void>((resolve) => socket.on('close', () => resolve()));
    socket.on('error', () => {});
    let stopping: Promise<void> | undefined;
    try {
      const body = JSON.stringify({ reference: 'in-flight' });
      const head = (path: string) => `POST ${path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n`;
      // 100 Continue says the server has the request (its 'request' event) and waits for the body.
      socket.write(`${head(RESEND)}expect: 100-continue\r\n\r\n`);
      await waitFor('100 Continue', () => received.includes('100 Continue'));
      stopping = leaving.stop();
      // The stop has closed the listening socket: what comes now comes on a kept-alive connection.
      await waitFor('PORT closed', () => fetch(`http://127.0.0.1:${leaving.port}/healthz`).then(() => false, () => true));
      socket.write(body);
      await waitFor('the answer', () => /\r\n\r\n\{[^]*\}$/.test(received.split('100 Continue\r\n\r\n')[1] ?? ''));
      // A client (a proxy's pool, kube-proxy's conntrack) would send its next request here: the stop's.
      socket.write(`${head('/nucleus/tnx/webhook?second')}\r\n${body}`);
      await closed;
      const answers = received.match(/HTTP\/1\.1 [2-5]\d\d /g) ?? [];
      expect({ answers: answers.length, connection: /\r\nconnection: (\S+)/i.exec(received)?.[1]?.toLowerCase() }).toEqual({ answers: 1, connection: 'close' });
    } finally {
      socket.destroy();
      await (stopping ?? leaving.stop());
    }
  });

  it('documents, on every operation, the answers any request can get before its route: 400 invalid_body, 413 and 431', async () => {
    const answers: typeof seen = [];
    const paths = openApiDocument.paths as unknown as Record<string, Record<string, unknown>>;
    for (const [template, item] of Object.entries(paths)) {
      const path = template.replace('{merchantId}', alice.id).replace('{webhookId}', 'evt_1').replace('{endpointId}', 'ep_1');
      for (const method of Object.keys(item)) {
        for (const [headers, body] of [
          // With its length: node:http sends a GET's body unframed otherwise.
          [{ 'content-type': 'application/json', 'content-length': '9' }, '{not json'],
          [{ 'content-type': 'application/json', 'content-length': '20008' }, JSON.stringify({ x: 'y'.repeat(20_000) })],
          [{ 'x-filler': 'x'.repeat(20_000) }, undefined],
        ] as const) {
          // node:http, not fetch: fetch sends no body with a GET.
          const answer = await new Promise<Answer>((resolve, reject) => {
            const req = request({ host: '127.0.0.1', port: api.port, method: method.toUpperCase(), path, headers, timeout: 5_000 }, (res) => {
              let text = '';
              res.on('data', (chunk: Buffer) => (text += chunk));
              res.on('end', () => resolve({ status: res.statusCode!, headers: new Headers(), body: text.startsWith('{') ? JSON.parse(text) : text }));
            });
            req.on('timeout', () => req.destroy(new Error(`${method} ${path}: no answer`)));
            req.on('error', reject);
            req.end(body);
          });
          answers.push({ path, method, ...answer });
        }
      }
    }
    expect(new Set(answers.map((a) => a.status))).toEqual(new Set([400, 413, 431]));
    expectDocumented(answers);
  });

  it('documents the 503 every operation but /healthz and /readyz answers while the API starts', async () => {
    // An API waiting for its schema (a database not migrated): PORT answers from the first moment.
    const db = await createTestDatabase('api_starting', undefined, { migrated: false });
    const port = await freePort();
    const config = loadApiConfig({
      RABBITMQ_URL: brokerUrl(), DATABASE_URL: db.url, TOPOLOGY_PREFIX: harness.prefix, PORT: String(port),
      PORTAL_PUBLIC_URL: `http://127.0.0.1:${port}`, AUTH_JWT_SECRET: JWT_SECRET, SECRETS_KEY: TEST_SECRETS_KEY, FAILED_RETENTION: '1D', DELIVERY_LOG: 'off',
    });
    const abort = new AbortController();
    const starting = startApi(config, silentLogger(), { signal: abort.signal }).catch(() => undefined);
    const answers: typeof seen = [];
    try {
      await waitFor('PORT listening', async () => (await fetch(`http://127.0.0.1:${port}/healthz`).catch(() => undefined))?.status === 200);
      for (const [template, item] of Object.entries(openApiDocument.paths as unknown as Record<string, Record<string, unknown>>)) {
        const path = template.replace('{merchantId}', alice.id).replace('{webhookId}', 'evt_1').replace('{endpointId}', 'ep_1');
        for (const method of Object.keys(item)) {
          const res = await fetch(`http://127.0.0.1:${port}${path}`, { method: method.toUpperCase() });
          answers.push({ path, method, status: res.status, headers: res.headers, body: await res.json() });
        }
      }
    } finally {
      abort.abort();
      await (await starting)?.stop();
      await db.drop();
    }
    expect(answers.filter((a) => a.status !== 503).map((a) => a.path).sort()).toEqual(['/healthz']);
    expectDocumented(answers);
  });

  it('matches every response it gave to the OpenAPI document served at /openapi.json', async () => {
    const served = await call(api, '/openapi.json', { method: 'GET' });
    expect(served.body).toEqual(JSON.parse(JSON.stringify(openApiDocument)));
    const statuses = expectDocumented(seen);
    for (const status of ['200', '400', '401', '403', '404', '413', '429', '431', '503']) expect(statuses).toContain(`${RESEND} ${status}`);
  });
});
