import { sampleEvent } from '../../libs/contracts/index.js';
import { EventPublisher } from '../../libs/publisher/index.js';
import type { ApiProgram } from '../../apps/api/program.js';
import { call, token, unresolved } from '../support/api.js';
import { runProgram } from '../support/process.js';
import { type PortalStack, redeemLink, startPortalStack } from '../support/portal.js';
import { Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

/**
 * A merchant's audit trail (GET /admin/merchants/{id}/audit): every settings write, and what a
 * portal session or the merchant's own API did that changes no setting (a session opened, a used
 * link presented again, test events, resends), with who and from where; never a secret.
 */
describe('the audit trail', () => {
  let stack: PortalStack;
  let receiver: Receiver;
  let api: ApiProgram;

  beforeAll(async () => {
    receiver = await Receiver.start((_n, req) => (req.path.endsWith('/down') ? 500 : 204));
    stack = await startPortalStack('audit-trail', 1);
    api = stack.apis[0]!;
  });

  afterAll(async () => {
    await stack?.close();
    await receiver?.close();
  });

  type Entry = { actor: string; action: string; changes: Record<string, any>; address: string | null };
  const trailOf = async (merchantId: string): Promise<Entry[]> => {
    const trail = await stack.admin(api, 'GET', `/admin/merchants/${merchantId}/audit`);
    expect(trail.status).toBe(200);
    return ((trail.body as any).data.entries as Entry[]).reverse();
  };

  it('keeps an audit trail of every settings write, link and revocation: who, what (never a secret), when, from where', async () => {
    await stack.putMerchant('m_audit', `${receiver.url}/audit`);
    const b = await stack.open('m_audit', { permissions: ['manage-endpoint', 'manage-secret'] });
    expect((await stack.write(b, 'PATCH', '/portal/api/endpoint', { url: `${receiver.url}/audit/moved`, events: ['payout'] })).status).toBe(200);
    const rotated = await stack.write(b, 'POST', '/portal/api/endpoint/secret/rotate', { graceSeconds: 0 });
    expect(rotated.status).toBe(200);
    expect((await stack.write(b, 'POST', '/portal/api/endpoint/test', { event: 'payout' })).status).toBe(202);
    expect((await stack.admin(api, 'PATCH', '/admin/merchants/m_audit', { webhook: { enabled: false } })).status).toBe(200);
    expect((await stack.admin(api, 'DELETE', '/admin/merchants/m_audit/portal-sessions')).status).toBe(200);

    const trail = await stack.admin(api, 'GET', '/admin/merchants/m_audit/audit');
    expect(trail.status).toBe(200);
    const entries = (trail.body as any).data.entries as Array<{ actor: string; action: string; changes: Record<string, any>; address: string | null }>;
    expect(entries.map((e) => [e.action, e.actor.replace(/^portal:[A-Za-z0-9_-]{12}$/, 'portal:<session>')]).reverse()).toEqual([
      ['merchant.created', 'admin:dashboard-backend'],
      ['portal.link_minted', 'admin:dashboard-backend'],
      ['portal.session_opened', 'portal:<session>'],
      ['merchant.updated', 'portal:<session>'],
      ['secret.rotated', 'portal:<session>'],
      ['portal.test_event', 'portal:<session>'],
      ['merchant.updated', 'admin:dashboard-backend'],
      ['portal.sessions_revoked', 'admin:dashboard-backend'],
    ]);
    expect(entries[4]!.changes).toEqual({ 'webhook.url': { from: `${receiver.url}/audit`, to: `${receiver.url}/audit/moved` }, 'webhook.events': { from: null, to: ['payout'] } });
    expect(entries[3]!.changes).toEqual({ 'webhook.secret': 'rotated' });
    expect(entries[2]!.changes).toMatchObject({ event: 'payout', reference: expect.stringMatching(/^TEST-/) });
    expect(entries[1]!.changes).toMatchObject({ 'webhook.enabled': { from: true, to: false }, 'webhook.disabledReason': { from: null, to: 'manual' } });
    expect(entries.every((e) => e.address !== null)).toBe(true);
    expect(JSON.stringify(trail.body)).not.toContain('whsec_');

    const cli = await runProgram('dist/apps/cli/main.js', { DATABASE_URL: stack.db.url, SECRETS_KEY: stack.env.SECRETS_KEY! }, ['merchants', 'audit', 'm_audit']);
    expect(cli.code).toBe(0);
    expect(cli.stdout.split('\n')[0]).toMatch(/^AT\s+ACTOR\s+ACTION\s+ADDRESS\s+CHANGES/);
    expect(cli.stdout).toContain('secret.rotated');
    expect(cli.stdout).not.toContain('whsec_');
  });

  it('records a used link presented again, which ends the sessions it opened', async () => {
    await stack.putMerchant('m_reused', `${receiver.url}/reused`);
    const url = await stack.link('m_reused', { permissions: [] });
    expect((await redeemLink(api, url)).status).toBe(201);
    expect((await redeemLink(api, url)).status).toBe(401);
    const entries = await trailOf('m_reused');
    expect(entries.map((e) => e.action)).toEqual(['merchant.created', 'portal.link_minted', 'portal.session_opened', 'portal.link_reused']);
    expect(entries[3]).toMatchObject({ actor: 'portal', changes: { sessionsEnded: true } });
    expect(entries[3]!.address).not.toBeNull();
  });

  it("records a resend made through the merchant's own API, by reference and by webhook id", async () => {
    await stack.putMerchant('m_resends', `${receiver.url}/down`);
    const publisher = new EventPublisher(stack.dispatcher.broker, stack.prefix);
    // Two failures: one resent by its reference, the other by its webhook id.
    const failed = [];
    for (let i = 0; i < 2; i++) {
      const message = sampleEvent('payout', 'm_resends');
      const reference = (message.data as Record<string, string>).reference!;
      const { messageId } = await publisher.publish(message);
      await stack.logged('m_resends', messageId, 'failed');
      await waitFor('in the failure index', async () => (await unresolved(api, 'm_resends', reference)) > 0 || undefined, 10_000);
      failed.push({ reference, messageId });
    }
    const [byReference, byId] = failed as [{ reference: string; messageId: string }, { reference: string; messageId: string }];
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
});
