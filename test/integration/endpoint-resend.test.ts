/**
 * Resends when a merchant has several endpoints (issue 56): a webhook fails once per endpoint, and
 * each failure is resent once, to its own endpoint (x-endpoint-id), never to one where the webhook
 * was delivered. The failures are written through the failure index as the dispatcher writes them
 * (with their endpoint), and the dispatcher is paused: the resent copies stay in dispatch, where
 * the test reads their headers. The API replicas read the merchants from PostgreSQL, where the
 * test writes them with two endpoints each (the merchants file allows one until the dispatcher fans out).
 */
import type { GetMessage } from 'amqplib';
import type { ApiProgram } from '../../apps/api/program.js';
import { HEADERS, sampleEvent } from '../../libs/contracts/index.js';
import { INDEX_FROM_LOG } from '../../libs/failed/index.js';
import { legacyEndpointId, type Merchant, SecretBox } from '../../libs/merchants/index.js';
import { call, startTestApi, token } from '../support/api.js';
import { TEST_SECRETS_KEY } from '../support/dispatcher-program.js';
import { type Harness, startHarness, testMerchant, testSecret } from '../support/harness.js';

const RESEND = '/nucleus/tnx/webhook';

describe('resends per endpoint', () => {
  const alice = testMerchant('m_fan', 'https://alice.example/a');
  // A: the endpoint its one webhook became (migration 0011), what a failure from before endpoints was for.
  const [A, B] = [legacyEndpointId('m_fan'), 'ep_fan_b'];
  alice.endpoints = [
    { id: A, url: 'https://alice.example/a', enabled: true, secret: testSecret() },
    { id: B, url: 'https://alice.example/b', enabled: true, secret: testSecret() },
  ];
  // Its second endpoint is off.
  const carol = testMerchant('m_fan_off', 'https://carol.example/on');
  const [ON, OFF] = ['ep_carol_on', 'ep_carol_off'];
  carol.endpoints = [
    { id: ON, url: 'https://carol.example/on', enabled: true, secret: testSecret() },
    { id: OFF, url: 'https://carol.example/off', enabled: false, disabledReason: 'manual', secret: testSecret() },
  ];
  // Its one endpoint takes collections only: its payouts' failures stay until payout is added back.
  const dave = testMerchant('m_fan_narrow', 'https://dave.example/charges');
  const NARROW = 'ep_dave_narrow';
  dave.endpoints = [{ id: NARROW, url: 'https://dave.example/charges', enabled: true, events: ['charge.completed'], secret: testSecret() }];
  let harness: Harness;
  let one: ApiProgram;
  let two: ApiProgram;
  let n = 0;

  beforeAll(async () => {
    harness = await startHarness({ name: 'endpoint-resend', merchants: [], paused: true });
    const box = new SecretBox(Buffer.from(TEST_SECRETS_KEY, 'base64'));
    for (const m of [alice, carol, dave]) {
      const clear = m.endpoints.map(({ secret: _secret, ...settings }) => settings);
      const sealed = box.seal(JSON.stringify(Object.fromEntries(m.endpoints.map((e) => [e.id, { secret: e.secret }]))), m.id);
      await harness.database.query('INSERT INTO merchants (id, public_key, endpoints, secrets, version) VALUES ($1, $2, $3, $4, 1)', [m.id, m.publicKey, JSON.stringify(clear), sealed]);
    }
    const env = { DATABASE_URL: harness.database.url, SECRETS_KEY: TEST_SECRETS_KEY };
    [one, two] = await Promise.all([startTestApi(harness.prefix, [], {}, env), startTestApi(harness.prefix, [], {}, env)]);
  });

  afterAll(async () => {
    await one?.stop();
    await two?.stop();
    await harness?.close();
  });

  const headersOf = async (merchant: Merchant) => ({ 'x-auth-token': merchant.publicKey, authorization: `Bearer ${await token(merchant.id)}` });

  /** A payout of `merchant` failed on each of `endpoints` ('' alone: a row written before endpoints), as the dispatcher indexes it. */
  async function failedOn(merchant: Merchant, endpoints: Array<string | undefined>): Promise<{ webhookId: string; reference: string }> {
    const message = sampleEvent('payout', merchant.id);
    const reference = `po-fan-${++n}-${Date.now()}`;
    message.data.reference = reference;
    const webhookId = `wh_fan_${n}`;
    for (const endpointId of endpoints) {
      const headers: Record<string, string> = { [HEADERS.merchantId]: merchant.id, [HEADERS.reference]: reference, [HEADERS.event]: 'payout', [HEADERS.webhookId]: webhookId };
      if (endpointId !== undefined) headers[HEADERS.endpointId] = endpointId;
      await one.failures.record({
        merchantId: merchant.id,
        webhookId,
        endpointId,
        failedAt: new Date(),
        event: 'payout',
        references: [reference],
        reason: 'attempts-exhausted',
        attempts: 7,
        content: JSON.stringify(message),
        headers,
      });
    }
    return { webhookId, reference };
  }

  /** The copies the resends put in dispatch (the dispatcher is paused): taken, with their endpoint. */
  async function copies(atLeast: number): Promise<Array<{ webhookId: unknown; endpointId: unknown }>> {
    const got: GetMessage[] = atLeast === 0 ? [] : await harness.test.drain(harness.names.dispatch, atLeast);
    // Nothing more arrives after the answers: what is there now is everything.
    expect(await harness.test.messageCount(harness.names.dispatch)).toBe(0);
    return got.map((m) => ({ webhookId: m.properties.messageId, endpointId: m.properties.headers?.[HEADERS.endpointId] }));
  }

  const open = async (merchantId: string, webhookId: string) =>
    (await one.failures.list({ merchantId, unresolvedOnly: true, limit: 100 })).filter((f) => f.webhookId === webhookId).map((f) => f.endpointId);

  it('resends a reference that failed on one of two endpoints to that endpoint alone, once, whichever of two API replicas are asked at once', async () => {
    // Delivered on B, failed on A: only A's failure is in the index.
    const { webhookId, reference } = await failedOn(alice, [A]);
    const h = await headersOf(alice);
    const answers = await Promise.all([one, two, one, two].map((api) => call(api, `${RESEND}?reference=${reference}`, { headers: h })));
    const statuses = answers.map((a) => a.status);
    expect(statuses.filter((s) => s === 200)).toHaveLength(1);
    for (const status of statuses.filter((s) => s !== 200)) expect([404, 409]).toContain(status);
    expect(answers.find((a) => a.status === 200)!.body).toEqual({ message: `webhook sent for reference ${reference}`, error: null, data: null });
    expect(await copies(1)).toEqual([{ webhookId, endpointId: A }]);
    expect(await open(alice.id, webhookId)).toEqual([]);
    expect((await call(two, `${RESEND}?reference=${reference}`, { headers: h })).status).toBe(404);
  });

  it('keeps a failure on A and one on B of the same webhook as two rows, each resent once to its own endpoint', async () => {
    const { webhookId, reference } = await failedOn(alice, [A, B]);
    expect((await open(alice.id, webhookId)).sort()).toEqual([A, B]);
    expect((await one.failures.list({ merchantId: alice.id, endpointId: B, limit: 100 })).map((f) => [f.webhookId, f.endpointId])).toContainEqual([webhookId, B]);
    const h = await headersOf(alice);
    // A malformed endpointId is the client's mistake (400, as the OpenAPI document says), not "no failed webhook" (404).
    const malformed = await call(one, `/nucleus/webhooks/${webhookId}/resend?endpointId=bad`, { headers: h });
    expect([malformed.status, (malformed.body as { error?: { code?: string } }).error?.code]).toEqual([400, 'invalid_parameter']);
    // By webhook id, on B only (query endpointId).
    const onB = await call(one, `/nucleus/webhooks/${webhookId}/resend?endpointId=${B}`, { headers: h });
    expect(onB.status).toBe(200);
    expect(await copies(1)).toEqual([{ webhookId, endpointId: B }]);
    expect((await call(two, `/nucleus/webhooks/${webhookId}/resend?endpointId=${B}`, { headers: h })).status).toBe(404);
    expect(await open(alice.id, webhookId)).toEqual([A]);
    // By reference: what is left, A's.
    expect((await call(two, `${RESEND}?reference=${reference}`, { headers: h })).status).toBe(200);
    expect(await copies(1)).toEqual([{ webhookId, endpointId: A }]);
    expect((await call(one, `/nucleus/webhooks/${webhookId}/resend`, { headers: h })).status).toBe(404);
  });

  it('resends both endpoints\' failures of a reference in one call, each once', async () => {
    const { webhookId, reference } = await failedOn(alice, [A, B]);
    const h = await headersOf(alice);
    const answers = await Promise.all([one, two].map((api) => call(api, `${RESEND}?reference=${reference}`, { headers: h })));
    expect(answers.map((a) => a.status)).toContain(200);
    const sent = await copies(2);
    expect(sent.sort((x, y) => String(x.endpointId).localeCompare(String(y.endpointId)))).toEqual([
      { webhookId, endpointId: A },
      { webhookId, endpointId: B },
    ]);
  });

  it('resends a fanned-out webhook whose failures on both endpoints only the recorder indexed (from the log\'s copy), each to its own endpoint', async () => {
    // The dispatcher could not write the failures (PostgreSQL down): the recorder indexed them from
    // the log's rows, one per endpoint, each with the body. The resend sends the log's copy.
    const message = sampleEvent('payout', alice.id);
    const reference = `po-fan-logged-${Date.now()}`;
    message.data.reference = reference;
    const webhookId = `wh_fan_logged_${++n}`;
    for (const [seq, endpointId] of [A, B].entries()) {
      await harness.database.query(
        `INSERT INTO delivery_webhooks (merchant_id, webhook_id, endpoint_id, first_seen_at, seq, event, refs, merchant_refs, payload, status, attempts, last_record_at)
         VALUES ($1, $2, $3, now(), $4, 'payout', $5, $6, $7, 'failed', 1, now())`,
        [alice.id, webhookId, endpointId, 1_000 + n * 2 + seq, [reference], [`${alice.id}\u001f${reference}`], JSON.stringify({ event: 'payout', data: message.data })],
      );
    }
    const at = new Date();
    await harness.database.query(INDEX_FROM_LOG, [[alice.id, alice.id], [webhookId, webhookId], [at, at], ['attempts-exhausted', 'attempts-exhausted'], [A, B], [0, 0]]);
    expect((await open(alice.id, webhookId)).sort()).toEqual([A, B]);
    const answer = await call(one, `${RESEND}?reference=${reference}`, { headers: await headersOf(alice) });
    expect(answer.status).toBe(200);
    const sent = await copies(2);
    expect(sent.sort((x, y) => String(x.endpointId).localeCompare(String(y.endpointId)))).toEqual([
      { webhookId, endpointId: A },
      { webhookId, endpointId: B },
    ]);
    expect(await open(alice.id, webhookId)).toEqual([]);
  });

  it('still resends a failure written before endpoints, to the merchant\'s first endpoint', async () => {
    const { webhookId, reference } = await failedOn(alice, [undefined]);
    expect(await open(alice.id, webhookId)).toEqual([null]);
    const h = await headersOf(alice);
    expect((await call(one, `${RESEND}?reference=${reference}`, { headers: h })).status).toBe(200);
    expect(await copies(1)).toEqual([{ webhookId, endpointId: A }]);
    // By webhook id naming the first endpoint: the same row.
    const again = await failedOn(alice, [undefined]);
    expect((await call(two, `/nucleus/webhooks/${again.webhookId}/resend?endpointId=${A}`, { headers: h })).status).toBe(200);
    expect(await copies(1)).toEqual([{ webhookId: again.webhookId, endpointId: A }]);
  });

  it('keeps a failure written before endpoints once the endpoint the webhook became is deleted: not sent to whichever is first now', async () => {
    // Carol's webhook became legacyEndpointId('m_fan_off'); she deleted it and has ON and OFF now.
    const { webhookId, reference } = await failedOn(carol, [undefined]);
    const answer = await call(one, `${RESEND}?reference=${reference}`, { headers: await headersOf(carol) });
    expect([answer.status, (answer.body as { error: { code: string } }).error.code]).toEqual([409, 'endpoint_deleted']);
    // Named as the endpoint it was, not as '' (the row's own mark for "before endpoints").
    expect((answer.body as { message: string }).message).toBe(`The endpoint ${legacyEndpointId(carol.id)} was deleted; its failed webhooks cannot be resent`);
    expect(await copies(0)).toEqual([]);
    expect(await open(carol.id, webhookId)).toEqual([null]);
  });

  it('answers 409 endpoint_deleted for a failure of an endpoint deleted since, and keeps it', async () => {
    const { webhookId, reference } = await failedOn(alice, ['ep_fan_gone']);
    const answer = await call(one, `${RESEND}?reference=${reference}`, { headers: await headersOf(alice) });
    expect(answer.status).toBe(409);
    expect(answer.body).toMatchObject({ error: { code: 'endpoint_deleted' }, data: null });
    expect(await copies(0)).toEqual([]);
    expect(await open(alice.id, webhookId)).toEqual(['ep_fan_gone']);
  });

  it('resends to the enabled endpoint and keeps the disabled one\'s failure (409 webhook_disabled when it is all there is)', async () => {
    const h = await headersOf(carol);
    const both = await failedOn(carol, [ON, OFF]);
    expect((await call(one, `${RESEND}?reference=${both.reference}`, { headers: h })).status).toBe(200);
    expect(await copies(1)).toEqual([{ webhookId: both.webhookId, endpointId: ON }]);
    expect(await open(carol.id, both.webhookId)).toEqual([OFF]);
    const answer = await call(two, `${RESEND}?reference=${both.reference}`, { headers: h });
    expect([answer.status, (answer.body as { error: { code: string } }).error.code]).toEqual([409, 'webhook_disabled']);
    const byId = await call(two, `/nucleus/webhooks/${both.webhookId}/resend?endpointId=${OFF}`, { headers: h });
    expect([byId.status, (byId.body as { error: { code: string } }).error.code]).toEqual([409, 'webhook_disabled']);
    expect(await copies(0)).toEqual([]);
    expect(await open(carol.id, both.webhookId)).toEqual([OFF]);
  });

  it('answers what would let a resend go, not endpoint_deleted, when a failure of a deleted endpoint is beside one that can be resent later', async () => {
    const h = await headersOf(dave);
    // Failed on NARROW, which no longer receives payouts, and on an endpoint deleted since.
    const narrowed = await failedOn(dave, [NARROW, 'ep_dave_gone']);
    const answer = await call(one, `${RESEND}?reference=${narrowed.reference}`, { headers: h });
    expect([answer.status, (answer.body as { error: { code: string } }).error.code]).toEqual([409, 'event_not_subscribed']);
    // Turned off, and failed on the deleted one: enable it, then resend.
    const off = await failedOn(carol, [OFF, 'ep_carol_gone']);
    const disabled = await call(two, `${RESEND}?reference=${off.reference}`, { headers: await headersOf(carol) });
    expect([disabled.status, (disabled.body as { error: { code: string } }).error.code]).toEqual([409, 'webhook_disabled']);
    expect(await copies(0)).toEqual([]);
    expect((await open(dave.id, narrowed.webhookId)).sort()).toEqual(['ep_dave_gone', NARROW].sort());
  });
});
