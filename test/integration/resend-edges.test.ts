import { request } from 'node:http';
import { gzipSync } from 'node:zlib';
import { SignJWT } from 'jose';
import { Webhook } from 'standardwebhooks';
import { type ApiProgram } from '../../apps/api/program.js';
import { sampleEvent } from '../../libs/contracts/index.js';
import type { Merchant } from '../../libs/merchants/index.js';
import { call, expectDocumented, JWT_SECRET, seen, startTestApi, token, unresolved, waitReady } from '../support/api.js';
import { type Harness, startHarness, testMerchant } from '../support/harness.js';
import { Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

/**
 * What a client may send the resend endpoint (spec 4.1) beyond the well-formed call: every answer
 * in the spec's envelope with its status, never a 500, and nothing that tells one merchant another's
 * reference exists.
 */
const RESEND = '/nucleus/tnx/webhook';
const NOT_FOUND = { message: 'No failed webhook for this reference', error: { code: 'not_found', status: 404 }, data: null };

describe('the resend endpoint, given what a client may send', () => {
  let mode: 'fail' | 'ok' = 'fail';
  let receiver: Receiver;
  let harness: Harness;
  let api: ApiProgram;
  let alice: Merchant;
  let bob: Merchant;

  beforeAll(async () => {
    receiver = await Receiver.start(() => (mode === 'fail' ? 500 : 200));
    alice = testMerchant('m_alice', receiver.url);
    bob = testMerchant('m_bob', receiver.url);
    harness = await startHarness({ name: 'resend-edges', merchants: [alice, bob], retryDelaysMs: [] });
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

  async function auth(merchant: Merchant): Promise<Record<string, string>> {
    return { 'x-auth-token': merchant.publicKey, authorization: `Bearer ${await token(merchant.id)}` };
  }

  /** A charge for `merchant` whose single attempt failed, indexed for resend. */
  async function failedCharge(merchant: Merchant, tnxRef?: string) {
    const message = sampleEvent('charge.completed', merchant.id);
    if (tnxRef !== undefined) message.data.tnxRef = tnxRef;
    const { messageId } = await harness.publisher.publish(message);
    const reference = String(message.data.tnxRef);
    await waitFor(`failure of ${reference} indexed`, async () => (await unresolved(api, merchant.id, reference)) > 0);
    return { message, messageId, reference };
  }

  it.each([
    ['a JSON array', 'application/json', '[1,2]'],
    ['JSON null', 'application/json', 'null'],
    ['a JSON string', 'application/json', '"reference"'],
    ['a JSON object with unknown fields', 'application/json', '{"reference":"other","merchantId":"m_bob","x":1}'],
    ['an empty JSON body', 'application/json', ''],
    ['a text/plain body', 'text/plain', 'hello'],
    ['a form-encoded body naming another reference', 'application/x-www-form-urlencoded', 'reference=other'],
    ['an XML body', 'application/xml', '<reference>x</reference>'],
  ])('ignores %s, as the route says, and answers as for no body', async (_name, contentType, body) => {
    const answer = await call(api, `${RESEND}?reference=never-failed`, { headers: { ...(await auth(alice)), 'content-type': contentType }, body });
    expect({ status: answer.status, body: answer.body }).toEqual({ status: 404, body: NOT_FOUND });
  });

  it('resends with a body of any kind beside the reference: the body changes nothing', async () => {
    const { messageId, reference } = await failedCharge(alice);
    mode = 'ok';
    const before = receiver.requests.length;
    const answer = await call(api, `${RESEND}?reference=${reference}`, { headers: { ...(await auth(alice)), 'content-type': 'application/json' }, body: '[null]' });
    expect(answer.body).toEqual({ message: `webhook sent for reference ${reference}`, error: null, data: null });
    const [resent] = (await receiver.waitForRequests(before + 1)).slice(before);
    expect(resent!.headers['webhook-id']).toBe(messageId);
  });

  it.each([
    ['a charset JSON is never sent in', { 'content-type': 'application/json; charset=latin1' }, '{}'],
    ['a content encoding it cannot read', { 'content-type': 'application/json', 'content-encoding': 'br-unknown' }, '{}'],
  ])('answers 400 invalid_body for %s', async (_name, headers, body) => {
    const answer = await call(api, `${RESEND}?reference=never-failed`, { headers: { ...(await auth(alice)), ...headers }, body });
    expect(answer.status).toBe(400);
    expect(answer.body).toMatchObject({ error: { code: 'invalid_body', status: 400 }, data: null });
  });

  it('answers 400 in the envelope for a gzip body that does not inflate', async () => {
    const answer = await rawPost(api.port, `${RESEND}?reference=never-failed`, { ...(await auth(alice)), 'content-type': 'application/json', 'content-encoding': 'gzip' }, gzipSync('{}').subarray(0, 8));
    expect(answer.status).toBe(400);
    expect(JSON.parse(answer.body)).toMatchObject({ error: { status: 400 }, data: null });
  });

  it('resends a reference in any script, astral characters included, and echoes it in the message', async () => {
    const { reference } = await failedCharge(alice, `支払い-💳-ñ-${crypto.randomUUID()}`);
    mode = 'ok';
    const answer = await call(api, `${RESEND}?reference=${encodeURIComponent(reference)}`, { headers: await auth(alice) });
    expect(answer.body).toEqual({ message: `webhook sent for reference ${reference}`, error: null, data: null });
  });

  it('answers 400 invalid_reference, not a lookup, for percent-encoding that is not UTF-8', async () => {
    // A lone surrogate's UTF-8 form and a truncated sequence: no reference the service could hold.
    for (const query of ['%ED%A0%80', '%E0%A4%A', '%FF']) {
      const answer = await call(api, `${RESEND}?reference=${query}`, { headers: await auth(alice) });
      expect({ query, status: answer.status, body: answer.body }).toEqual({
        query,
        status: 400,
        body: { message: expect.any(String), error: { code: 'invalid_reference', status: 400 }, data: null },
      });
    }
  });

  it('reads a % not followed by two hex digits as itself, as the query parser does: looked up, not refused', async () => {
    const { reference } = await failedCharge(alice, `50%off-${crypto.randomUUID()}`);
    mode = 'ok';
    const answer = await call(api, `${RESEND}?reference=${reference}`, { headers: await auth(alice) });
    expect(answer.body).toEqual({ message: `webhook sent for reference ${reference}`, error: null, data: null });
  });

  it('answers a 1 MB reference in the envelope (431), not a dropped connection', async () => {
    const answer = await call(api, `${RESEND}?reference=${'r'.repeat(1024 * 1024)}`, { headers: await auth(alice) });
    expect(answer.status).toBe(431);
    expect(answer.body).toMatchObject({ error: { code: 'header_too_large', status: 431 }, data: null });
  });

  it.each([
    ['a token without sub', 401, async () => ({ 'x-auth-token': alice.publicKey, authorization: `Bearer ${await subless()}` })],
    ['a token naming a merchant that does not exist', 403, async () => ({ 'x-auth-token': alice.publicKey, authorization: `Bearer ${await token('m_ghost')}` })],
    ['an empty Bearer token', 401, async () => ({ 'x-auth-token': alice.publicKey, authorization: 'Bearer ' })],
    ['a token that is not a JWT', 401, async () => ({ 'x-auth-token': alice.publicKey, authorization: 'Bearer not.a.jwt' })],
    ['an empty public key', 401, async () => ({ 'x-auth-token': '', authorization: `Bearer ${await token(alice.id)}` })],
  ])('answers %s in the envelope with %d', async (_name, status, headers) => {
    const answer = await call(api, `${RESEND}?reference=never-failed`, { headers: await headers() });
    expect(answer.status).toBe(status);
    expect(answer.body).toMatchObject({ message: expect.any(String), error: { status }, data: null });
  });

  it('answers 404 for a reference whose webhook was delivered at its first attempt, and sends nothing', async () => {
    mode = 'ok';
    const message = sampleEvent('payout', alice.id);
    const { messageId } = await harness.publisher.publish(message);
    await waitFor('delivered', async () => receiver.requests.some((r) => r.headers['webhook-id'] === messageId));
    const before = receiver.requests.length;
    const answer = await call(api, `${RESEND}?reference=${String(message.data.reference)}`, { headers: await auth(alice) });
    expect({ status: answer.status, body: answer.body }).toEqual({ status: 404, body: NOT_FOUND });
    expect(receiver.requests.length).toBe(before);
  });

  it("answers another merchant's failed reference exactly as one that never existed, and leaves it", async () => {
    const { reference } = await failedCharge(alice);
    const foreign = await call(api, `${RESEND}?reference=${reference}`, { headers: await auth(bob) });
    const none = await call(api, `${RESEND}?reference=never-existed-${crypto.randomUUID()}`, { headers: await auth(bob) });
    expect({ status: foreign.status, body: foreign.body }).toEqual({ status: none.status, body: none.body });
    expect(foreign.status).toBe(404);
    expect(await unresolved(api, alice.id, reference)).toBe(1);
  });

  it('delivers once when the same resend is sent twice at once to one replica: one 200, the other 409 or 404', async () => {
    const { messageId, reference } = await failedCharge(bob);
    mode = 'ok';
    const headers = await auth(bob);
    const answers = await Promise.all([0, 1].map(() => call(api, `${RESEND}?reference=${reference}`, { headers })));
    const statuses = answers.map((a) => a.status).sort();
    expect(statuses[0]).toBe(200);
    expect([404, 409]).toContain(statuses[1]);
    const other = answers.find((a) => a.status !== 200)!;
    expect(other.body).toMatchObject({ error: { status: other.status }, data: null });
    const copies = () => receiver.requests.filter((r) => r.headers['webhook-id'] === messageId);
    await waitFor('the resent copy delivered', async () => copies().length >= 2);
    // Marked resent: nothing is left to send, so no second copy can follow the first.
    expect((await call(api, `${RESEND}?reference=${reference}`, { headers })).body).toEqual(NOT_FOUND);
    expect(copies()).toHaveLength(2);
    new Webhook(bob.endpoints[0]!.secret).verify(copies()[1]!.body, copies()[1]!.headers as Record<string, string>);
  });

  it("resends by a charge's tnxRef both the charge and its refund that failed, each once, and then neither again", async () => {
    const charge = await failedCharge(alice);
    const refund = sampleEvent('refund.completed', alice.id);
    refund.data.tnxRef = charge.reference;
    const { messageId: refundId } = await harness.publisher.publish(refund);
    await waitFor('both failures indexed', async () => (await unresolved(api, alice.id, charge.reference)) === 2);
    mode = 'ok';
    const answer = await call(api, `${RESEND}?reference=${charge.reference}`, { headers: await auth(alice) });
    expect(answer.status).toBe(200);
    const copiesOf = (id: string) => receiver.requests.filter((r) => r.headers['webhook-id'] === id).length;
    await waitFor('both resent', async () => copiesOf(charge.messageId) === 2 && copiesOf(refundId) === 2);
    expect((await call(api, `${RESEND}?reference=${String(refund.data.refundRef)}`, { headers: await auth(alice) })).body).toEqual(NOT_FOUND);
    expect((await call(api, `${RESEND}?reference=${charge.reference}`, { headers: await auth(alice) })).body).toEqual(NOT_FOUND);
    expect([copiesOf(charge.messageId), copiesOf(refundId)]).toEqual([2, 2]);
  });

  it('gives only answers the OpenAPI document describes', () => {
    expectDocumented(seen.filter((a) => a.path === RESEND));
  });
});

/** A token signed with the right secret that names no merchant: jose's requiredClaims refuses it. */
function subless(): Promise<string> {
  return new SignJWT({}).setProtectedHeader({ alg: 'HS256' }).setIssuedAt().setExpirationTime('5m').sign(new TextEncoder().encode(JWT_SECRET));
}

function rawPost(port: number, path: string, headers: Record<string, string>, body: Buffer): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path, method: 'POST', headers: { ...headers, 'content-length': String(body.length) } }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode!, body: Buffer.concat(chunks).toString() }));
    });
    req.on('error', reject);
    req.end(body);
  });
}
