import { sampleEvent } from '../../libs/contracts/index.js';
import { EventPublisher } from '../../libs/publisher/index.js';
import type { ApiProgram } from '../../apps/api/program.js';
import { topologyNames } from '../../libs/topology/index.js';
import { adminToken, type Answer, call, startTestApi, token, unresolved } from '../support/api.js';
import { TestBroker, uniquePrefix } from '../support/broker.js';
import { runCliInProcess } from '../support/cli.js';
import { type PortalStack, redeemLink, startPortalStack } from '../support/portal.js';
import { Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

/**
 * A merchant's audit trail (GET /admin/merchants/{id}/audit): every settings write, and what a
 * portal session or the merchant's own API did that changes no setting (a session opened, a used
 * link presented again, test events, resends, Recover rounds), with who and from where; never a
 * secret. Two API replicas on one database: each action is in the trail once. An action whose
 * entry PostgreSQL refuses is answered 503, never reported as done.
 */
describe('the audit trail', () => {
  let stack: PortalStack;
  let receiver: Receiver;
  let api: ApiProgram;
  let other: ApiProgram;
  let publisher: EventPublisher;

  beforeAll(async () => {
    receiver = await Receiver.start((_n, req) => (req.path.endsWith('/down') ? 500 : 204));
    stack = await startPortalStack('audit-trail', 2);
    [api, other] = stack.apis as [ApiProgram, ApiProgram];
    publisher = new EventPublisher(stack.dispatcher.broker, stack.prefix);
  });

  afterAll(async () => {
    await stack?.close();
    await receiver?.close();
  });

  type Entry = { actor: string; action: string; changes: Record<string, any>; address: string | null };
  /** The admin API's path of the merchant's first endpoint. */
  const adminEndpoint = (merchantId: string) => `/admin/merchants/${merchantId}/endpoints/${stack.dispatcher.merchants.byId(merchantId)!.endpoints[0]!.id}`;
  const trailOf = async (merchantId: string): Promise<Entry[]> => {
    const trail = await stack.admin(api, 'GET', `/admin/merchants/${merchantId}/audit`);
    expect(trail.status).toBe(200);
    return ((trail.body as any).data.entries as Entry[]).reverse();
  };

  /** A payout of the merchant's, once the log says it failed and the failure index holds it. */
  async function failedWebhook(merchantId: string): Promise<{ reference: string; messageId: string }> {
    const message = sampleEvent('payout', merchantId);
    const reference = (message.data as Record<string, string>).reference!;
    const { messageId } = await publisher.publish(message);
    await stack.logged(merchantId, messageId, 'failed');
    await waitFor('in the failure index', async () => (await unresolved(api, merchantId, reference)) > 0 || undefined, 10_000);
    return { reference, messageId };
  }

  it('keeps an audit trail of every settings write, link and revocation: who, what (never a secret), when, from where', async () => {
    await stack.putMerchant('m_audit', `${receiver.url}/audit`);
    const b = await stack.open('m_audit', { permissions: ['manage-endpoint', 'manage-secret'] });
    expect((await stack.write(b, 'PATCH', stack.endpoint('m_audit'), { url: `${receiver.url}/audit/moved`, events: ['payout'] })).status).toBe(200);
    const rotated = await stack.write(b, 'POST', `${stack.endpoint('m_audit')}/secret/rotate`, { graceSeconds: 0 });
    expect(rotated.status).toBe(200);
    expect((await stack.write(b, 'POST', `${stack.endpoint('m_audit')}/test`, { event: 'payout' })).status).toBe(202);
    expect((await stack.admin(api, 'PATCH', adminEndpoint('m_audit'), { enabled: false })).status).toBe(200);
    expect((await stack.admin(api, 'DELETE', '/admin/merchants/m_audit/portal-sessions')).status).toBe(200);

    const trail = await stack.admin(api, 'GET', '/admin/merchants/m_audit/audit');
    expect(trail.status).toBe(200);
    const entries = (trail.body as any).data.entries as Array<{ actor: string; action: string; changes: Record<string, any>; address: string | null }>;
    expect(entries.map((e) => [e.action, e.actor.replace(/^portal:[A-Za-z0-9_-]{12}$/, 'portal:<session>')]).reverse()).toEqual([
      ['merchant.created', 'admin:dashboard-backend'],
      ['endpoint.created', 'admin:dashboard-backend'],
      ['portal.link_minted', 'admin:dashboard-backend'],
      ['portal.session_opened', 'portal:<session>'],
      ['endpoint.updated', 'portal:<session>'],
      ['secret.rotated', 'portal:<session>'],
      ['portal.test_event', 'portal:<session>'],
      ['endpoint.updated', 'admin:dashboard-backend'],
      ['portal.sessions_revoked', 'admin:dashboard-backend'],
    ]);
    // Each change names the endpoint it was made to.
    const ep = `endpoints.${stack.dispatcher.merchants.byId('m_audit')!.endpoints[0]!.id}`;
    expect(entries[4]!.changes).toEqual({ [`${ep}.url`]: { from: `${receiver.url}/audit`, to: `${receiver.url}/audit/moved` }, [`${ep}.events`]: { from: null, to: ['payout'] } });
    expect(entries[3]!.changes).toEqual({ [`${ep}.secret`]: 'rotated' });
    expect(entries[2]!.changes).toMatchObject({ event: 'payout', endpointId: ep.slice('endpoints.'.length), reference: expect.stringMatching(/^TEST-/) });
    expect(entries[1]!.changes).toMatchObject({ [`${ep}.enabled`]: { from: true, to: false }, [`${ep}.disabledReason`]: { from: null, to: 'manual' } });
    expect(entries.every((e) => e.address !== null)).toBe(true);
    expect(JSON.stringify(trail.body)).not.toContain('whsec_');

    const cli = await runCliInProcess({ DATABASE_URL: stack.db.url, SECRETS_KEY: stack.env.SECRETS_KEY! }, ['merchants', 'audit', 'm_audit']);
    expect(cli.code).toBe(0);
    expect(cli.stdout.split('\n')[0]).toMatch(/^AT\s+ACTOR\s+ACTION\s+ADDRESS\s+CHANGES/);
    expect(cli.stdout).toContain('secret.rotated');
    expect(cli.stdout).not.toContain('whsec_');
  });

  it("records an operator taking over the merchant's own disable, which ends the merchant's sessions and its say over the endpoint", async () => {
    await stack.putMerchant('m_takeover', `${receiver.url}/takeover`);
    const b = await stack.open('m_takeover', { permissions: ['manage-endpoint'] });
    expect((await stack.write(b, 'PATCH', stack.endpoint('m_takeover'), { enabled: false })).status).toBe(200);
    expect((await stack.admin(api, 'PATCH', adminEndpoint('m_takeover'), { enabled: false })).status).toBe(200);
    const [last] = (await trailOf('m_takeover')).reverse();
    const ep = `endpoints.${stack.dispatcher.merchants.byId('m_takeover')!.endpoints[0]!.id}`;
    expect(last).toMatchObject({ action: 'endpoint.updated', changes: { [`${ep}.disabledBy`]: { from: 'merchant', to: 'operator' } } });
    expect(last!.actor).toMatch(/^admin:/);
  });

  it('records a used link presented again, which ends the sessions it opened', async () => {
    await stack.putMerchant('m_reused', `${receiver.url}/reused`);
    const url = await stack.link('m_reused', { permissions: [] });
    expect((await redeemLink(api, url)).status).toBe(201);
    expect((await redeemLink(api, url)).status).toBe(401);
    const entries = await trailOf('m_reused');
    expect(entries.map((e) => e.action)).toEqual(['merchant.created', 'endpoint.created', 'portal.link_minted', 'portal.session_opened', 'portal.link_reused']);
    expect(entries[4]).toMatchObject({ actor: 'portal', changes: { sessionsEnded: true } });
    expect(entries[4]!.address).not.toBeNull();
  });

  it("records a resend made through the merchant's own API, by reference and by webhook id", async () => {
    await stack.putMerchant('m_resends', `${receiver.url}/down`);
    // Two failures: one resent by its reference, the other by its webhook id.
    const byReference = await failedWebhook('m_resends');
    const byId = await failedWebhook('m_resends');
    const headers = { 'x-auth-token': 'pk_test_m_resends_000000', authorization: `Bearer ${await token('m_resends')}` };
    expect((await call(api, `/nucleus/tnx/webhook?reference=${byReference.reference}`, { headers })).status).toBe(200);
    expect((await call(api, `/nucleus/webhooks/${byId.messageId}/resend`, { headers })).status).toBe(200);
    const resent = (await trailOf('m_resends')).filter((e) => e.action === 'webhook.resent');
    expect(resent.map((e) => [e.actor, e.changes])).toEqual([
      ['merchant-api', { reference: byReference.reference, resent: 1 }],
      ['merchant-api', { webhookId: byId.messageId, resent: 1 }],
    ]);
    expect(resent.every((e) => e.address !== null)).toBe(true);
  });

  it('records the copies a resend stopped midway sent, with their count, as a whole resend is recorded', async () => {
    await stack.putMerchant('m_cut', `${receiver.url}/down`);
    const endpointId = stack.dispatcher.merchants.byId('m_cut')!.endpoints[0]!.id;
    await stack.db.query(
      `INSERT INTO failed_webhooks (merchant_id, webhook_id, endpoint_id, failed_at, event, merchant_refs, reason, attempts, content)
       SELECT 'm_cut', 'evt_audit_cut_' || g, $1, now() - (4 - g) * interval '1 s', 'payout', ARRAY['m_cut' || chr(31) || 'PO-AUDIT-CUT'], 'attempts-exhausted', 3, $2
       FROM generate_series(1, 3) AS g`,
      [endpointId, JSON.stringify(sampleEvent('payout', 'm_cut'))],
    );
    // An API of its own topology, no dispatcher on it: its dispatch takes one copy and refuses the
    // next (as a queue at its length limit does), so the resend stops after its first.
    const prefix = uniquePrefix('audit-trail-cut');
    const cut = await startTestApi(prefix, [], {}, stack.env);
    const test = await TestBroker.open();
    try {
      const dispatch = topologyNames(prefix).dispatch;
      await test.channel.deleteQueue(dispatch);
      await test.channel.assertQueue(dispatch, { durable: true, arguments: { 'x-max-length': 1, 'x-overflow': 'reject-publish' } });
      const headers = { 'x-auth-token': 'pk_test_m_cut_000000', authorization: `Bearer ${await token('m_cut')}` };
      expect((await call(cut, '/nucleus/tnx/webhook?reference=PO-AUDIT-CUT', { headers })).status).toBe(503);
      expect(await test.messageCount(dispatch)).toBe(1);
      const resent = (await trailOf('m_cut')).filter((e) => e.action === 'webhook.resent');
      expect(resent.map((e) => [e.actor, e.changes])).toEqual([['merchant-api', { reference: 'PO-AUDIT-CUT', resent: 1 }]]);
    } finally {
      await cut.stop();
      await test.deleteTopology(prefix);
      await test.close();
    }
  });

  it('records a portal resend and a Recover round, each once although two replicas serve the session', async () => {
    await stack.putMerchant('m_portal', `${receiver.url}/down`);
    const { messageId } = await failedWebhook('m_portal');
    // Minted on one replica, opened and used on the other, the trail read from both.
    const b = await stack.open('m_portal', { permissions: ['resend'] });
    const since = '2026-01-01T00:00:00.000Z';
    const round = await call(other, `/portal/api/recover?since=${since}`, { method: 'GET', headers: { cookie: b.cookie } });
    expect(round.status).toBe(200);
    expect((round.body as any).data.webhooks.map((w: { webhookId: string }) => w.webhookId)).toEqual([messageId]);
    expect((await stack.write(b, 'POST', `/portal/api/webhooks/${messageId}/resend`, undefined, b.csrf, other)).status).toBe(200);
    for (const replica of [api, other]) {
      const answer = await stack.admin(replica, 'GET', '/admin/merchants/m_portal/audit');
      const entries = ((answer.body as any).data.entries as Entry[]).reverse();
      expect(entries.map((e) => [e.action, e.actor.replace(/^portal:[A-Za-z0-9_-]{12}$/, 'portal:<session>'), e.changes])).toEqual([
        ['merchant.created', 'admin:dashboard-backend', expect.anything()],
        ['endpoint.created', 'admin:dashboard-backend', expect.anything()],
        ['portal.link_minted', 'admin:dashboard-backend', expect.anything()],
        ['portal.session_opened', 'portal:<session>', { permissions: ['resend'] }],
        ['portal.recover_round', 'portal:<session>', { since }],
        ['portal.webhook_resent', 'portal:<session>', { webhookId: messageId, resent: 1 }],
      ]);
      expect(entries.every((e) => e.address !== null)).toBe(true);
    }
  });

  it("records an admin token's subject with control characters as it can be stored, the write done (PostgreSQL refuses a NUL in text: a good write was refused as invalid settings)", async () => {
    await stack.putMerchant('m_sub', `${receiver.url}/audit`);
    const authorization = `Bearer ${await adminToken('webhooks:admin', 'ops\u0000\u001bbot')}`;
    const answer = await call(api, adminEndpoint('m_sub'), { method: 'PATCH', headers: { authorization, 'content-type': 'application/json' }, body: JSON.stringify({ description: 'by a bot' }) });
    expect(answer.status).toBe(200);
    expect((await trailOf('m_sub')).map((e) => [e.action, e.actor]).slice(-1)).toEqual([['endpoint.updated', 'admin:ops\uFFFD\uFFFDbot']]);
    // A NUL in what the admin sends is a 400, as PostgreSQL would refuse it: in a description, a merchant's id.
    const nul = await stack.admin(api, 'PATCH', adminEndpoint('m_sub'), { description: 'by a\u0000bot' });
    expect([nul.status, (nul.body as any).error?.code]).toEqual([400, 'invalid_settings']);
    expect((await stack.admin(api, 'GET', '/admin/merchants/m%00sub')).status).toBe(400);
    expect((await stack.admin(api, 'PUT', '/admin/merchants/m%00sub', { publicKey: 'pk_test_m_sub_nul_0000' })).status).toBe(400);
  });

  it('answers 503 for an action whose audit entry PostgreSQL refuses, with nothing of what it would have given', async () => {
    await stack.putMerchant('m_refused', `${receiver.url}/down`);
    const [first, second] = [await failedWebhook('m_refused'), await failedWebhook('m_refused')];
    const b = await stack.open('m_refused', { permissions: ['resend', 'manage-endpoint', 'manage-secret'] });
    const unopened = await stack.link('m_refused', { permissions: [] });
    // From here PostgreSQL refuses every audit entry of this merchant (this file's own database).
    await stack.db.query(`CREATE FUNCTION refuse_audit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'audit refused'; END $$`);
    await stack.db.query(`CREATE TRIGGER refuse_audit BEFORE INSERT ON merchant_audit FOR EACH ROW WHEN (NEW.merchant_id = 'm_refused') EXECUTE FUNCTION refuse_audit()`);
    const refused = (answer: Answer) => {
      expect([answer.status, answer.body]).toEqual([503, { message: expect.stringContaining('audit trail'), error: { code: 'service_unavailable', status: 503 }, data: null }]);
      expect(answer.headers.get('set-cookie')).toBeNull();
    };
    try {
      const headers = { 'x-auth-token': 'pk_test_m_refused_000000', authorization: `Bearer ${await token('m_refused')}` };
      // Writes in one transaction with their entry: nothing changed.
      refused(await stack.admin(api, 'PATCH', adminEndpoint('m_refused'), { url: `${receiver.url}/down/moved` }));
      refused(await stack.write(b, 'PATCH', stack.endpoint('m_refused'), { url: `${receiver.url}/down/moved` }, b.csrf, other));
      refused(await stack.write(b, 'POST', `${stack.endpoint('m_refused')}/secret/rotate`, { graceSeconds: 0 }));
      expect(await stack.db.query(`SELECT version::int, endpoints->0->>'url' AS url FROM merchants WHERE id = 'm_refused'`)).toEqual([{ version: 2, url: `${receiver.url}/down` }]);
      // Actions on other tables, or out through the broker: answered 503, no link, no cookie.
      refused(await stack.admin(api, 'POST', '/admin/merchants/m_refused/portal-sessions', { permissions: [] }));
      refused(await redeemLink(other, unopened));
      refused(await call(api, `/portal/api/recover?since=2026-01-01T00:00:00.000Z`, { method: 'GET', headers: { cookie: b.cookie } }));
      refused(await stack.write(b, 'POST', `/portal/api/webhooks/${first.messageId}/resend`));
      refused(await stack.write(b, 'POST', `${stack.endpoint('m_refused')}/test`, { event: 'payout' }, b.csrf, other));
      // The merchant API's resend answers as the specification says: the copy went out, the entry is only logged as missing.
      expect((await call(api, `/nucleus/webhooks/${second.messageId}/resend`, { headers })).status).toBe(200);
      refused(await stack.admin(other, 'DELETE', '/admin/merchants/m_refused/portal-sessions'));
    } finally {
      await stack.db.query('DROP TRIGGER refuse_audit ON merchant_audit');
    }
    // PostgreSQL writes again: the same write is done, and in the trail.
    expect((await stack.admin(api, 'PATCH', adminEndpoint('m_refused'), { url: `${receiver.url}/down/moved` })).status).toBe(200);
    expect((await trailOf('m_refused')).map((e) => e.action).slice(-1)).toEqual(['endpoint.updated']);
  });
});
