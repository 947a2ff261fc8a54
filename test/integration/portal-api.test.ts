import pg from 'pg';
import { request } from 'node:http';
import { sampleEvent } from '../../libs/contracts/index.js';
import { EventPublisher } from '../../libs/publisher/index.js';
import type { ApiProgram } from '../../apps/api/program.js';
import { adminToken, type Answer, call, expectDocumented, JWT_SECRET, seen, startTestApi, token, unresolved, waitReady } from '../support/api.js';
import { runCliInProcess } from '../support/cli.js';
import { type PortalBrowser, type PortalStack, redeemLink, startPortalStack, tokenOf } from '../support/portal.js';
import { Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';
import { keyDigestOf, PortalLinkError, PortalSessions, TokenSigner } from '../../libs/portal/index.js';
import { openPostgres } from '../../libs/delivery-store/index.js';

/**
 * The portal's API and the resend of one webhook, without a browser: what must hold whatever the
 * page does (single-use links across replicas, expiry, one merchant never reaching another's,
 * CSRF, permissions, exactly-once resends). portal-browser.test.ts drives the page itself.
 */
describe('the merchant portal API', () => {
  let stack: PortalStack;
  let receiver: Receiver;
  let publisher: EventPublisher;
  let apiA: ApiProgram;
  let apiB: ApiProgram;
  /** Paths (after /webhooks) that answer 500. */
  const failing = new Set<string>(['/a', '/b']);

  beforeAll(async () => {
    receiver = await Receiver.start((_n, req) => (failing.has(req.path.replace('/webhooks', '')) ? 500 : 204));
    stack = await startPortalStack('portal-api', 2);
    [apiA, apiB] = stack.apis as [ApiProgram, ApiProgram];
    publisher = new EventPublisher(stack.dispatcher.broker, stack.prefix);
    await stack.putMerchant('m_a', `${receiver.url}/a`);
    await stack.putMerchant('m_b', `${receiver.url}/b`);
  });

  afterAll(async () => {
    await stack?.close();
    await receiver?.close();
  });

  const code = (answer: Answer) => [answer.status, (answer.body as { error: { code: string } | null }).error?.code ?? null];
  const redeem = redeemLink;
  type Browser = PortalBrowser;
  const open = (merchantId: string, body?: unknown, api = apiA): Promise<Browser> => stack.open(merchantId, body, api);
  const get = (b: Browser, path: string, api = apiA) => call(api, path, { method: 'GET', headers: { cookie: b.cookie } });
  const write = (b: Browser, method: string, path: string, body?: unknown, csrf: string | null = b.csrf, api = apiA) => stack.write(b, method, path, body, csrf, api);
  /** The admin API's path of the merchant's first endpoint: the operator's side of the same endpoint. */
  const adminEndpoint = (merchantId: string) => `/admin/merchants/${merchantId}/endpoints/${stack.dispatcher.merchants.byId(merchantId)!.endpoints[0]!.id}`;

  /** Publishes an event for the merchant and waits until the log says it failed and the index holds it. */
  async function failedWebhook(merchantId: string, event: 'payout' | 'charge.completed' = 'payout', reference?: string) {
    const message = sampleEvent(event, merchantId);
    if (reference) (message.data as Record<string, unknown>)[event === 'payout' ? 'reference' : 'tnxRef'] = reference;
    const { messageId } = await publisher.publish(message);
    await stack.logged(merchantId, messageId, 'failed');
    const ref = (message.data as Record<string, string>)[event === 'payout' ? 'reference' : 'tnxRef']!;
    await waitFor('in the failure index', async () => (await unresolved(stack.apis[0]!, merchantId, ref)) > 0 || undefined, 10_000);
    return { webhookId: messageId, reference: ref };
  }

  it('gives a link that opens a session once, on whichever replica, and refuses it the second time, ending the session it made', async () => {
    const created = await stack.admin(apiA, 'POST', '/admin/merchants/m_a/portal-sessions', {});
    expect(created.status).toBe(201);
    const { url, expiresAt } = (created.body as { data: { url: string; expiresAt: string } }).data;
    expect(url).toMatch(new RegExp(`^http://127\\.0\\.0\\.1:${apiA.port}/portal/#token=[A-Za-z0-9_-]{43}\\.[A-Za-z0-9_-]{43}$`));
    expect(Date.parse(expiresAt) - Date.now()).toBeGreaterThan(3_500_000);

    // Minted on A, opened on B, then on A again: refused, whatever replica is asked.
    const first = await redeem(apiB, url);
    expect(first.status).toBe(201);
    const cookie = first.headers.get('set-cookie')!;
    // A session cookie (no Max-Age): it ends with the browser, and sooner on the server.
    expect(cookie).toMatch(/^webhooks_portal=[A-Za-z0-9_-]{43}\.[A-Za-z0-9_-]{43}; Path=\/portal; HttpOnly; SameSite=Strict$/);
    expect((first.body as { data: unknown }).data).toMatchObject({ merchantId: 'm_a', permissions: [] });
    // The session itself works on either replica.
    const session = { cookie: cookie.split(';')[0]!, csrf: '' };
    expect((await get(session, '/portal/api/session', apiA)).status).toBe(200);
    expect((await get(session, '/portal/api/session', apiB)).status).toBe(200);
    // Used a second time, the link is refused, and whoever opened it first loses the session too:
    // one of the two is not the merchant.
    expect(code(await redeem(apiA, url))).toEqual([401, 'portal_link_used']);
    expect(code(await redeem(apiB, url))).toEqual([401, 'portal_link_used']);
    expect(code(await get(session, '/portal/api/session', apiA))).toEqual([401, 'portal_session_required']);
  });

  it('neither ends a session nor mints a link for what a replica a change behind holds', async () => {
    await stack.putMerchant('m_behind', `${receiver.url}/behind`);
    await waitFor('both replicas hold it', async () => (await Promise.all([apiA, apiB].map((api) => stack.admin(api, 'GET', '/admin/merchants/m_behind')))).every((a) => a.status === 200), 5_000, 20);
    const auth = { authorization: `Bearer ${await adminToken()}`, 'content-type': 'application/json' };
    /** A new public key whose notification never comes; replica A then holds it (a write refused on it), B does not. */
    const rekey = async (publicKey: string) => {
      await stack.db.query("UPDATE merchants SET public_key = $1, version = version + 1, change_xid = pg_current_xact_id() WHERE id = 'm_behind'", [publicKey]);
      const refused = await call(apiA, '/admin/merchants/m_behind', { method: 'PATCH', headers: { ...auth, 'if-match': '"1"' }, body: JSON.stringify({ publicKey }) });
      expect(code(refused)).toEqual([412, 'precondition_failed']);
    };
    const session = (cookie: string, api: ApiProgram) => call(api, '/portal/api/session', { method: 'GET', headers: { cookie } });
    const cookieOf = (answer: Answer) => answer.headers.get('set-cookie')!.split(';')[0]!;

    // Minted on B: for the key the merchant has now, so the session works where that key is known.
    await rekey('pk_test_m_behind_2');
    const mintedBehind = await redeem(apiA, await stack.link('m_behind', undefined, apiB));
    expect(mintedBehind.status).toBe(201);
    expect((await session(cookieOf(mintedBehind), apiA)).status).toBe(200);

    // Opened on A after the new key: B, still at the old one, does not end it for good.
    await rekey('pk_test_m_behind_3');
    const opened = await redeem(apiA, await stack.link('m_behind', undefined, apiA));
    expect(opened.status).toBe(201);
    expect([(await session(cookieOf(opened), apiB)).status, (await session(cookieOf(opened), apiA)).status]).toEqual([200, 200]);
  });

  it('ends the sessions when the operator turns an endpoint off, even one turned on again or deleted before their next request', async () => {
    for (const [merchantId, after] of [['m_offon', { enabled: true }], ['m_offdel', undefined]] as const) {
      await stack.putMerchant(merchantId, `${receiver.url}/${merchantId}`);
      const b = await open(merchantId, undefined, apiB);
      expect((await get(b, '/portal/api/session', apiB)).status).toBe(200);
      const path = adminEndpoint(merchantId);
      expect((await stack.admin(apiA, 'PATCH', path, { enabled: false })).status).toBe(200);
      expect((await stack.admin(apiA, after ? 'PATCH' : 'DELETE', path, after)).status).toBe(200);
      expect((await get(b, '/portal/api/session', apiB)).status).toBe(401);
    }
  });

  it('leaves no session alive after a revocation, not even one opened from a link while the revocation runs', async () => {
    await stack.putMerchant('m_rev', `${receiver.url}/rev`);
    await open('m_rev');
    const unused = await stack.link('m_rev');
    // Holds the revocation's first statement a moment: the window it has anyway, widened.
    const locker = new pg.Client({ connectionString: stack.db.url });
    await locker.connect();
    try {
      await locker.query('BEGIN');
      await locker.query("SELECT 1 FROM portal_sessions WHERE merchant_id = 'm_rev' FOR UPDATE");
      await locker.query("SELECT 1 FROM portal_links WHERE merchant_id = 'm_rev' AND redeemed_at IS NOT NULL FOR UPDATE");
      const revoking = stack.admin(apiA, 'DELETE', '/admin/merchants/m_rev/portal-sessions');
      await waitFor('the revocation waits', async () => (await stack.db.query<{ n: number }>("SELECT count(*)::integer AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'DELETE FROM portal_%'"))[0]!.n > 0, 5_000, 20);
      const opened = await redeem(apiB, unused);
      await locker.query('COMMIT');
      expect((await revoking).status).toBe(200);
      // Opened before the revocation took the links (201), or refused after (401): never alive after it.
      if (opened.status === 201) expect((await get({ cookie: opened.headers.get('set-cookie')!.split(';')[0]!, csrf: '' }, '/portal/api/session', apiB)).status).toBe(401);
      else expect(code(opened)).toEqual([401, 'portal_link_invalid']);
    } finally {
      await locker.end();
    }
  });

  it('ends a stolen session on logout, on revocation, on a new public key and on an operator\'s disable', async () => {
    await stack.putMerchant('m_stolen', `${receiver.url}/stolen`);
    const full = { permissions: ['resend', 'manage-endpoint', 'manage-secret'] };
    const alive = async (b: Browser) => (await get(b, '/portal/api/session', apiB)).status === 200;

    const loggedOut = await open('m_stolen', full);
    const out = await write(loggedOut, 'POST', '/portal/api/logout');
    expect(out.status).toBe(200);
    expect(out.headers.get('set-cookie')).toMatch(/^webhooks_portal=; Path=\/portal; HttpOnly; SameSite=Strict; Max-Age=0$/);
    expect(await alive(loggedOut)).toBe(false);

    const one = await open('m_stolen', full);
    const two = await open('m_stolen', full, apiB);
    const unused = await stack.link('m_stolen');
    const revoked = await stack.admin(apiB, 'DELETE', '/admin/merchants/m_stolen/portal-sessions');
    expect(revoked.status).toBe(200);
    expect((revoked.body as any).data).toEqual({ sessions: 2, links: 1 });
    expect([await alive(one), await alive(two)]).toEqual([false, false]);
    expect(code(await redeem(apiA, unused))).toEqual([401, 'portal_link_invalid']);
    const cli = await runCliInProcess({ AUTH_JWT_SECRET: JWT_SECRET }, ['portal', '--merchant', 'm_stolen', '--revoke', '--api', `http://127.0.0.1:${apiA.port}`]);
    expect(cli).toMatchObject({ code: 0, stderr: expect.stringContaining('0 portal session(s) and 0 unused link(s) of merchant m_stolen ended') });

    const rekeyed = await open('m_stolen', full);
    expect((await stack.admin(apiA, 'PATCH', '/admin/merchants/m_stolen', { publicKey: 'pk_test_m_stolen_rekeyed' })).status).toBe(200);
    await waitFor('the new key seen by both replicas', async () => !(await alive(rekeyed)), 5_000, 50);

    // The operator turns the webhook off: the session that could have turned it on (elsewhere) dies,
    // and a new one may not undo the operator.
    const hijacked = await open('m_stolen', full);
    expect((await stack.admin(apiA, 'PATCH', adminEndpoint('m_stolen'), { enabled: false })).status).toBe(200);
    await waitFor('the disable seen by both replicas', async () => !(await alive(hijacked)), 5_000, 50);
    expect(code(await write(hijacked, 'PATCH', stack.endpoint('m_stolen'), { enabled: true, url: 'https://attacker.example/x' }))).toEqual([401, 'portal_session_required']);
    const fresh = await open('m_stolen', full);
    expect(code(await write(fresh, 'PATCH', stack.endpoint('m_stolen'), { enabled: true }))).toEqual([409, 'endpoint_disabled_by_operator']);
    expect(stack.dispatcher.merchants.byId('m_stolen')?.endpoints[0]?.enabled).toBe(false);
    // What the merchant turned off itself, it may turn on again.
    expect((await stack.admin(apiA, 'PATCH', adminEndpoint('m_stolen'), { enabled: true })).status).toBe(200);
    const own = await open('m_stolen', full);
    expect((await write(own, 'PATCH', stack.endpoint('m_stolen'), { enabled: false })).status).toBe(200);
    expect((await write(own, 'PATCH', stack.endpoint('m_stolen'), { enabled: true })).status).toBe(200);
    expect(await alive(own)).toBe(true);
  });

  it('makes an operator\'s disable of a webhook the merchant turned off the operator\'s: the portal cannot undo it', async () => {
    await stack.putMerchant('m_offoff', `${receiver.url}/offoff`);
    const full = { permissions: ['manage-endpoint'] };
    const merchant = await open('m_offoff', full);
    expect((await write(merchant, 'PATCH', stack.endpoint('m_offoff'), { enabled: false })).status).toBe(200);
    const disabled = await stack.admin(apiA, 'PATCH', adminEndpoint('m_offoff'), { enabled: false });
    expect(disabled.status).toBe(200);
    expect((disabled.body as any).data).toMatchObject({ enabled: false, disabledReason: 'manual' });
    const fresh = await open('m_offoff', full);
    expect(code(await write(fresh, 'PATCH', stack.endpoint('m_offoff'), { enabled: true }))).toEqual([409, 'endpoint_disabled_by_operator']);
  });

  it('keeps an endpoint the operator turned off from sending again by way of a new one: the portal may not delete it or move its URL', async () => {
    const url = `${receiver.url}/opoff`;
    await stack.putMerchant('m_opoff', url);
    const path = stack.endpoint('m_opoff');
    expect((await stack.admin(apiA, 'PATCH', adminEndpoint('m_opoff'), { enabled: false })).status).toBe(200);
    const merchant = await open('m_opoff', { permissions: ['manage-endpoint'] });
    // Deleted, or moved elsewhere, it would leave its URL free for a new endpoint, on at once.
    expect(code(await write(merchant, 'DELETE', path))).toEqual([409, 'endpoint_disabled_by_operator']);
    expect(code(await write(merchant, 'PATCH', path, { url: `${receiver.url}/opoff-moved` }))).toEqual([409, 'endpoint_disabled_by_operator']);
    expect(code(await write(merchant, 'POST', '/portal/api/endpoints', { url }))).toEqual([409, 'endpoint_url_taken']);
    // The operator may.
    expect((await stack.admin(apiA, 'DELETE', adminEndpoint('m_opoff'))).status).toBe(200);
  });

  it('starts at most 10 Recover rounds a day per merchant, on all replicas together', async () => {
    await stack.putMerchant('m_replay', `${receiver.url}/replay`);
    const resender = await open('m_replay', { permissions: ['resend'] });
    const viewer = await open('m_replay', { permissions: [] });
    const rounds = [];
    for (let i = 0; i < 11; i++) rounds.push((await get(resender, '/portal/api/recover?since=2026-01-01T00:00:00.000Z', i % 2 ? apiB : apiA)).status);
    expect(rounds).toEqual([...Array(10).fill(200), 429]);
    // A session that may not resend only looks: its count costs nothing.
    expect((await get(viewer, '/portal/api/recover?since=2026-01-01T00:00:00.000Z')).status).toBe(200);
  });

  it('refuses a portal write that a browser says comes from another site', async () => {
    const b = await open('m_a', { permissions: ['manage-endpoint'] });
    const cross = (headers: Record<string, string>) =>
      call(apiA, `${stack.endpoint('m_a')}/test`, { method: 'POST', headers: { cookie: b.cookie, 'content-type': 'application/json', 'x-csrf-token': b.csrf, ...headers }, body: '{"event":"payout"}' });
    expect(code(await cross({ origin: 'https://evil.example' }))).toEqual([403, 'cross_origin_write']);
    expect(code(await cross({ 'sec-fetch-site': 'cross-site' }))).toEqual([403, 'cross_origin_write']);
    expect(code(await cross({ 'sec-fetch-site': 'same-site' }))).toEqual([403, 'cross_origin_write']);
    expect((await cross({ origin: `http://127.0.0.1:${apiA.port}`, 'sec-fetch-site': 'same-origin' })).status).toBe(202);
  });

  it('refuses a link exchange that a browser says comes from another site (login CSRF), and leaves the link unused', async () => {
    const url = await stack.link('m_a');
    const exchange = (headers: Record<string, string>) =>
      call(apiA, '/portal/api/session', { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify({ token: tokenOf(url) }) });
    expect(code(await exchange({ origin: 'https://evil.example' }))).toEqual([403, 'cross_origin_write']);
    expect(code(await exchange({ 'sec-fetch-site': 'cross-site' }))).toEqual([403, 'cross_origin_write']);
    expect(code(await exchange({ origin: 'null' }))).toEqual([403, 'cross_origin_write']);
    expect((await exchange({ origin: `http://127.0.0.1:${apiA.port}`, 'sec-fetch-site': 'same-origin' })).status).toBe(201);
  });

  it('builds links in development mode without PORTAL_PUBLIC_URL from its own address, never from the request\'s Host', async () => {
    const auth = `Bearer ${await adminToken()}`;
    // node:http, which sends the Host given (fetch puts the URL's own).
    const body = await new Promise<string>((resolve, reject) => {
      const req = request(
        { host: '127.0.0.1', port: apiA.port, method: 'POST', path: '/admin/merchants/m_a/portal-sessions', headers: { authorization: auth, 'content-type': 'application/json', host: `attacker.example:${apiA.port}` } },
        (res) => {
          let text = '';
          res.on('data', (chunk: Buffer) => (text += chunk.toString()));
          res.on('end', () => resolve(text));
        },
      );
      req.on('error', reject);
      req.end('{}');
    });
    const url = (JSON.parse(body) as { data: { url: string } }).data.url;
    expect(url.startsWith(`http://127.0.0.1:${apiA.port}/portal/#token=`)).toBe(true);
  });

  it('refuses forged session cookies and link tokens without a query, on the API and in the sessions\' own code', async () => {
    const database = openPostgres(stack.db.url);
    let queries = 0;
    const counted = { query: (text: string, params?: unknown[]) => (queries++, database.query(text, params)) } as typeof database;
    const signer = new TokenSigner(Buffer.alloc(32, 3));
    const sessions = new PortalSessions(counted, signer);
    const real = signer.make();
    const forged = [real.replace(/.$/, (c) => (c === 'A' ? 'B' : 'A')), `${real.split('.')[0]}.${'x'.repeat(43)}`, 'a'.repeat(87), 'short', `${real}x`];
    for (const token of forged) {
      expect(await sessions.session(token)).toBeUndefined();
      await expect(sessions.redeem(token)).rejects.toThrow(PortalLinkError);
    }
    // A token signed with another key (another deployment's) is forged here too.
    expect(await sessions.session(new TokenSigner(Buffer.alloc(32, 4)).make())).toBeUndefined();
    expect(queries).toBe(0);
    await database.close();
    // Through the API: a flood of made-up cookies all answer 401, and the replicas' pools stay free for everyone else.
    const answers = await Promise.all(Array.from({ length: 200 }, (_, i) => get({ cookie: `webhooks_portal=${'a'.repeat(43)}.${String(i).padStart(43, 'b')}`, csrf: '' }, '/portal/api/webhooks', i % 2 ? apiB : apiA)));
    expect(new Set(answers.map((a) => a.status))).toEqual(new Set([401]));
    expect(code(await redeem(apiA, `http://x/portal/#token=${'c'.repeat(43)}.${'d'.repeat(43)}`))).toEqual([401, 'portal_link_invalid']);
  });

  it('ends a session idle longer than its timeout, whatever its link\'s expiry', async () => {
    const database = openPostgres(stack.db.url);
    const sessions = new PortalSessions(database, undefined, 400);
    const { token } = await sessions.createLink('m_a', [], 3_600_000, keyDigestOf('pk_test_m_a_000000'));
    const { sessionId } = await sessions.redeem(token);
    expect(await sessions.session(sessionId)).toBeDefined();
    const touched = Date.now();
    await waitFor('more than the idle timeout passed', () => Date.now() - touched > 600, 2_000, 50);
    expect(await sessions.session(sessionId)).toBeUndefined();
    await database.close();
  });

  it('prints a link from the CLI that opens the portal with the permissions asked for', async () => {
    const run = await runCliInProcess({ AUTH_JWT_SECRET: JWT_SECRET }, [
      'portal', '--merchant', 'm_a', '--permissions', 'resend', '--expires-in', '10m', '--api', `http://127.0.0.1:${apiA.port}`,
    ]);
    expect(run).toMatchObject({ code: 0, stderr: expect.stringMatching(/^works once, until \d{4}-/) });
    const opened = await redeem(apiB, run.stdout.trim());
    expect(opened.status).toBe(201);
    expect((opened.body as { data: { permissions: string[] } }).data.permissions).toEqual(['resend']);
    const refused = await runCliInProcess({ AUTH_JWT_SECRET: JWT_SECRET }, ['portal', '--merchant', 'm_nobody', '--api', `http://127.0.0.1:${apiA.port}`]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain('404');
  });

  it('lets exactly one of two replicas redeem a link opened on both at the same moment', async () => {
    for (let round = 0; round < 5; round++) {
      const url = await stack.link('m_a');
      const answers = await Promise.all([redeem(apiA, url), redeem(apiB, url)]);
      expect(answers.map((a) => a.status).sort()).toEqual([201, 401]);
    }
  });

  it('refuses a link after its expiry, and an unknown one', async () => {
    const url = await stack.link('m_a', { expiresIn: '1s' });
    await waitFor('the link expired by PostgreSQL\'s clock', async () => (await stack.db.query<{ over: boolean }>('SELECT bool_and(expires_at < now()) AS over FROM portal_links WHERE expires_at < now() + interval \'2 seconds\''))[0]?.over === true, 5_000, 100);
    expect(code(await redeem(apiA, url))).toEqual([401, 'portal_link_expired']);
    expect(code(await redeem(apiA, `${url.slice(0, -4)}AAAA`))).toEqual([401, 'portal_link_invalid']);
    expect(code(await stack.admin(apiA, 'POST', '/admin/merchants/m_a/portal-sessions', { expiresIn: '8d' }))).toEqual([400, 'invalid_body']);
    expect(code(await stack.admin(apiA, 'POST', '/admin/merchants/m_nobody/portal-sessions', {}))).toEqual([404, 'merchant_not_found']);
    const merchantToken = await token('m_a');
    expect(code(await call(apiA, '/admin/merchants/m_a/portal-sessions', { method: 'POST', headers: { authorization: `Bearer ${merchantToken}` } }))).toEqual([403, 'insufficient_scope']);
  });

  it('never shows or resends another merchant\'s webhook, by id or by API call', async () => {
    const theirs = await failedWebhook('m_b');
    const mine = await failedWebhook('m_a');
    const a = await open('m_a');
    const list = await get(a, '/portal/api/webhooks?limit=100');
    const ids = (list.body as { data: { webhooks: Array<{ webhookId: string }> } }).data.webhooks.map((w) => w.webhookId);
    expect(ids).toContain(mine.webhookId);
    expect(ids).not.toContain(theirs.webhookId);
    expect(code(await get(a, `/portal/api/webhooks/${theirs.webhookId}`))).toEqual([404, 'webhook_not_found']);
    expect(code(await get(a, `/portal/api/webhooks?reference=${theirs.reference}`))).toEqual([200, null]);
    expect((await get(a, `/portal/api/webhooks?reference=${theirs.reference}`)).body).toMatchObject({ data: { webhooks: [] } });
    expect(code(await write(a, 'POST', `/portal/api/webhooks/${theirs.webhookId}/resend`))).toEqual([404, 'not_found']);
    // A merchant's own credentials do not reach another's webhook either.
    const auth = { 'x-auth-token': 'pk_test_m_a_000000', authorization: `Bearer ${await token('m_a')}` };
    expect(code(await call(apiA, `/nucleus/webhooks/${theirs.webhookId}/resend`, { headers: auth }))).toEqual([404, 'not_found']);
    expect(await unresolved(apiA, 'm_b', theirs.reference)).toBe(1);
    // No query parameter names a merchant.
    expect(code(await get(a, '/portal/api/webhooks?merchantId=m_b'))).toEqual([400, 'unknown_parameter']);
  });

  it('answers a resend refused by RESEND_RATE_LIMIT from memory until its Retry-After: a flood of them costs no query', async () => {
    await stack.putMerchant('m_flood', `${receiver.url}/flood`);
    const auth = { 'x-auth-token': 'pk_test_m_flood_000000', authorization: `Bearer ${await token('m_flood')}` };
    const resend = (api: ApiProgram) => call(api, '/nucleus/webhooks/wh_none/resend', { headers: auth });
    // Two replicas that allow 3 resends at once, refilled at 1 a minute.
    const small = { rateLimit: { perMinute: 1, burst: 3 } };
    const one = await waitReady(await startTestApi(stack.prefix, [], small, stack.env));
    const two = await waitReady(await startTestApi(stack.prefix, [], small, stack.env)).catch(async (err) => {
      await one.stop();
      throw err;
    });
    try {
      const answers = [await resend(one), await resend(two), await resend(one), await resend(one)];
      expect(answers.map(code)).toEqual([...Array(3).fill([404, 'not_found']), [429, 'rate_limited']]);
      // PostgreSQL forgets the count (as if a minute had passed): the replica that heard the refusal
      // still answers it, without asking, until its Retry-After; the other asks, and is allowed.
      await stack.db.query("DELETE FROM rate_limits WHERE key = 'resend:m_flood'");
      for (let i = 0; i < 20; i++) {
        const again = await resend(one);
        expect(code(again)).toEqual([429, 'rate_limited']);
        expect(Number(again.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
      }
      expect(Number((await stack.db.query<{ n: string }>("SELECT count(*) AS n FROM rate_limits WHERE key = 'resend:m_flood'"))[0]!.n)).toBe(0);
      expect(code(await resend(two))).toEqual([404, 'not_found']);
    } finally {
      await one.stop();
      await two.stop();
    }
  });

  it('refuses a write without the session\'s CSRF token, and one the link did not permit', async () => {
    const { webhookId } = await failedWebhook('m_a');
    const viewer = await open('m_a', { permissions: [] });
    const other = await open('m_a');
    expect(code(await write(viewer, 'POST', `/portal/api/webhooks/${webhookId}/resend`, undefined, null))).toEqual([403, 'csrf_token_invalid']);
    expect(code(await write(viewer, 'POST', `/portal/api/webhooks/${webhookId}/resend`, undefined, other.csrf))).toEqual([403, 'csrf_token_invalid']);
    expect(code(await write(viewer, 'POST', `/portal/api/webhooks/${webhookId}/resend`))).toEqual([403, 'permission_denied']);
    expect(code(await write(viewer, 'POST', `${stack.endpoint('m_a')}/secret/rotate`, {}))).toEqual([403, 'permission_denied']);
    expect(code(await write(viewer, 'PATCH', stack.endpoint('m_a'), { enabled: false }))).toEqual([403, 'permission_denied']);
    expect(code(await write(other, 'PATCH', stack.endpoint('m_a'), { url: 'not a url' }))).toEqual([400, 'invalid_settings']);
    expect((await write(other, 'POST', `${stack.endpoint('m_a')}/secret/rotate`, { graceSeconds: 0, grace: 1 })).body).toMatchObject({ message: 'unknown field grace; allowed: graceSeconds', error: { code: 'invalid_settings' } });
    const noSecret = await open('m_a', { permissions: ['resend', 'manage-endpoint'] });
    expect(code(await write(noSecret, 'POST', `${stack.endpoint('m_a')}/secret/rotate`, {}))).toEqual([403, 'permission_denied']);
    expect(code(await call(apiA, '/portal/api/session', { method: 'GET' }))).toEqual([401, 'portal_session_required']);
    expect(code(await call(apiA, '/portal/api/overview', { method: 'GET', headers: { cookie: 'webhooks_portal=forged' } }))).toEqual([401, 'portal_session_required']);
    // Nothing was resent by the refused writes.
    expect((await apiA.failures.list({ merchantId: 'm_a', unresolvedOnly: true, limit: 100 })).map((f) => f.webhookId)).toContain(webhookId);
    expect(code(await write(other, 'POST', `/portal/api/webhooks/${webhookId}/resend`))).toEqual([200, null]);
  });

  it('resends exactly the webhook asked for, once, however many replicas are asked at once', async () => {
    const reference = `PO-shared-${Date.now()}`;
    const one = await failedWebhook('m_a', 'payout', reference);
    const two = await failedWebhook('m_a', 'payout', reference);
    failing.delete('/a');
    try {
      const auth = { 'x-auth-token': 'pk_test_m_a_000000', authorization: `Bearer ${await token('m_a')}` };
      const before = receiver.requests.length;
      const answers = await Promise.all([apiA, apiB, apiA, apiB].map((api) => call(api, `/nucleus/webhooks/${one.webhookId}/resend`, { headers: auth })));
      const codes = answers.map(code);
      expect(codes.filter(([status]) => status === 200)).toHaveLength(1);
      expect(codes.filter(([status]) => status !== 200).every(([status, c]) => (status === 409 && c === 'resend_in_progress') || (status === 404 && c === 'not_found'))).toBe(true);
      expect(answers.find((a) => a.status === 200)!.body).toEqual({ message: `webhook ${one.webhookId} sent again`, error: null, data: null });
      await stack.logged('m_a', one.webhookId, 'delivered');
      // Its twin under the same reference stays failed and resendable.
      expect(await unresolved(apiB, 'm_a', reference)).toBe(1);
      const sent = receiver.requests.slice(before).filter((r) => r.path.endsWith('/a'));
      expect(sent.map((r) => r.headers['webhook-id'])).toEqual([one.webhookId]);
      expect(code(await call(apiB, `/nucleus/webhooks/${one.webhookId}/resend`, { headers: auth }))).toEqual([404, 'not_found']);
      expect(code(await call(apiB, `/nucleus/webhooks/${two.webhookId}/resend`, { headers: auth }))).toEqual([200, null]);
      await stack.logged('m_a', two.webhookId, 'delivered');
      expect(code(await call(apiA, `/nucleus/webhooks/${two.webhookId}/resend`, { headers: {} }))).toEqual([401, 'missing_credentials']);
    } finally {
      failing.add('/a');
    }
  });

  it('shows the endpoints and the last 24 hours as the log holds them', async () => {
    const a = await open('m_a');
    const answer = await get(a, '/portal/api/overview');
    expect(answer.status).toBe(200);
    const { endpoints, health } = (answer.body as { data: { endpoints: Array<Record<string, unknown>>; health: Record<string, any> } }).data;
    expect(endpoints).toEqual([expect.objectContaining({ url: `${receiver.url}/a`, enabled: true, disabledReason: null, disabledBy: null, failingSince: null, allEvents: true, secretCreatedAt: expect.any(String) })]);
    expect((await get(a, '/portal/api/endpoints')).body).toMatchObject({ data: { endpoints, maxEndpoints: 20 } });
    const rows = await stack.db.query<{ status: string; n: string }>(
      "SELECT status, count(*) AS n FROM delivery_webhooks WHERE merchant_id = 'm_a' AND first_seen_at > now() - interval '23 hours' GROUP BY status",
    );
    const expected = Object.fromEntries(rows.map((r) => [r.status, Number(r.n)]));
    expect(health.failed).toBe(expected.failed ?? 0);
    expect(health.delivered).toBe(expected.delivered ?? 0);
    expect(health.delivered + health.failed).toBeGreaterThan(0);
    expect(health.successRate).toBeCloseTo(health.delivered / (health.delivered + health.failed));
    expect(health.hours).toHaveLength(24);
    expect(health.hours.reduce((n: number, h: { failed: number }) => n + h.failed, 0)).toBe(health.failed);
    expect(health.medianResponseMs).toEqual(expect.any(Number));
    // The same counts per endpoint, from the same query grouped by endpoint too: one endpoint here.
    expect(health.endpoints).toEqual([{ endpointId: endpoints[0]!.id, delivered: health.delivered, retrying: health.retrying, failed: health.failed, skipped: health.skipped }]);
  });

  it('is never served on ADMIN_PORT, and the links minted there point at the public port', async () => {
    const split = await startTestApi(stack.prefix, [], {}, { ...stack.env, ADMIN_PORT: '0' });
    try {
      const onAdmin = await fetch(`http://127.0.0.1:${split.adminPort}/portal/`);
      expect(onAdmin.status).toBe(404);
      expect((await fetch(`http://127.0.0.1:${split.adminPort}/portal/api/session`)).status).toBe(404);
      expect((await fetch(`http://127.0.0.1:${split.port}/portal/`)).status).toBe(200);
      const minted = await fetch(`http://127.0.0.1:${split.adminPort}/admin/merchants/m_a/portal-sessions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${await adminToken()}` },
      });
      expect(minted.status).toBe(201);
      const { url } = ((await minted.json()) as { data: { url: string } }).data;
      expect(url.startsWith(`http://127.0.0.1:${split.port}/portal/#token=`)).toBe(true);
      expect((await redeem(split, url)).status).toBe(201);
    } finally {
      await split.stop();
    }
  });

  it('counts test events and endpoint changes per merchant across both replicas, apart from its resends', async () => {
    await stack.putMerchant('m_busy', `${receiver.url}/busy`);
    const b = await open('m_busy', { permissions: ['manage-endpoint', 'manage-secret'] });
    const tests = [];
    for (let i = 0; i < 12; i++) tests.push(await write(b, 'POST', `${stack.endpoint('m_busy')}/test`, { event: 'payout' }, b.csrf, i % 2 ? apiB : apiA));
    expect(tests.map((a) => a.status)).toEqual([...Array(10).fill(202), 429, 429]);
    expect(code(tests[11]!)).toEqual([429, 'rate_limited']);
    expect(Number(tests[11]!.headers.get('retry-after'))).toBeGreaterThan(0);
    const changes = [];
    for (let i = 0; i < 11; i++) changes.push(await write(b, 'PATCH', stack.endpoint('m_busy'), { url: `${receiver.url}/busy/${i}` }, b.csrf, i % 2 ? apiB : apiA));
    expect(changes.map((a) => a.status)).toEqual([...Array(10).fill(200), 429]);
    expect(code(await write(b, 'POST', `${stack.endpoint('m_busy')}/secret/rotate`, { graceSeconds: 0 }, b.csrf, apiB))).toEqual([429, 'rate_limited']);
  });

  it('counts only the endpoint changes it applied: refused ones (400, 404, 409) leave the merchant its 10 a minute', async () => {
    await stack.putMerchant('m_typo', `${receiver.url}/typo`);
    const b = await open('m_typo', { permissions: ['manage-endpoint', 'manage-secret'] });
    const endpoint = stack.endpoint('m_typo');
    const added = await write(b, 'POST', '/portal/api/endpoints', { url: `${receiver.url}/typo/2` });
    expect(added.status).toBe(201);
    const refused = [];
    for (let i = 0; i < 4; i++) {
      refused.push(code(await write(b, 'PATCH', endpoint, { url: `not a url ${i}` }, b.csrf, i % 2 ? apiB : apiA)));
      refused.push(code(await write(b, 'PATCH', '/portal/api/endpoints/ep_00000000000000000000000000', { description: 'x' }, b.csrf, i % 2 ? apiA : apiB)));
      refused.push(code(await write(b, 'PATCH', endpoint, { url: `${receiver.url}/typo/2` }, b.csrf, i % 2 ? apiB : apiA)));
    }
    expect(new Set(refused.map(String))).toEqual(new Set(['400,invalid_settings', '404,endpoint_not_found', '409,endpoint_url_taken']));
    const changes = [];
    for (let i = 0; i < 11; i++) changes.push((await write(b, 'PATCH', endpoint, { description: `change ${i}` }, b.csrf, i % 2 ? apiB : apiA)).status);
    // The add above was applied, so it counts: nine more fit at once (one more may have come back since), then 429.
    expect({ first: changes.slice(0, 9), last: changes.at(-1) }).toEqual({ first: Array(9).fill(200), last: 429 });
  });

  it('refuses a test event its endpoint would not be sent (disabled, or not receiving that event) instead of answering it sent', async () => {
    await stack.putMerchant('m_quiet', `${receiver.url}/quiet`);
    const b = await open('m_quiet', { permissions: ['manage-endpoint'] });
    const endpoint = stack.endpoint('m_quiet');
    expect((await write(b, 'PATCH', endpoint, { events: ['charge.completed'] })).status).toBe(200);
    await waitFor('the dispatcher holds the change', () => stack.dispatcher.merchants.byId('m_quiet')?.endpoints[0]?.events?.length === 1, 5_000);
    const outside = await write(b, 'POST', `${endpoint}/test`, { event: 'payout' });
    expect(code(outside)).toEqual([409, 'event_not_subscribed']);
    expect((await write(b, 'PATCH', endpoint, { enabled: false })).status).toBe(200);
    await waitFor('the dispatcher holds the change', () => stack.dispatcher.merchants.byId('m_quiet')?.endpoints[0]?.enabled === false, 5_000);
    const off = await write(b, 'POST', `${endpoint}/test`, { event: 'charge.completed' });
    expect(code(off)).toEqual([409, 'webhook_disabled']);
  });

  it('gives a link minted without permissions the power to view, and nothing else', async () => {
    const minted = await stack.admin(apiA, 'POST', '/admin/merchants/m_a/portal-sessions', {});
    expect(minted.status).toBe(201);
    const answer = await redeem(apiA, (minted.body as { data: { url: string } }).data.url);
    const viewer = { cookie: answer.headers.get('set-cookie')!.split(';')[0]!, csrf: (answer.body as any).data.csrfToken as string };
    expect((answer.body as any).data.permissions).toEqual([]);
    expect((await get(viewer, '/portal/api/webhooks')).status).toBe(200);
    expect(code(await write(viewer, 'POST', `${stack.endpoint('m_a')}/test`, { event: 'payout' }))).toEqual([403, 'permission_denied']);
    expect(code(await write(viewer, 'POST', `${stack.endpoint('m_a')}/secret/rotate`, { graceSeconds: 0 }))).toEqual([403, 'permission_denied']);
  });

  it('answers every /portal/api call with Cache-Control: no-store, refusals included', async () => {
    const b = await open('m_a');
    const answers = [await get(b, '/portal/api/session'), await get(b, '/portal/api/webhooks'), await get(b, '/portal/api/overview'), await get({ cookie: 'x=y', csrf: '' }, '/portal/api/webhooks')];
    expect(answers.map((a) => [a.status, a.headers.get('cache-control')])).toEqual([
      [200, 'no-store'],
      [200, 'no-store'],
      [200, 'no-store'],
      [401, 'no-store'],
    ]);
  });

  it('keeps portal sessions and links open across a rotation of SECRETS_KEY: a replica on the new key accepts what the old key signed', async () => {
    const b = await open('m_a');
    const unused = await stack.link('m_a');
    const rotated = await waitReady(
      await startTestApi(stack.prefix, [], {}, { ...stack.env, SECRETS_KEY: Buffer.alloc(32, 9).toString('base64'), SECRETS_KEY_PREVIOUS: stack.env.SECRETS_KEY }),
    );
    try {
      expect((await get(b, '/portal/api/session', rotated)).status).toBe(200);
      expect((await redeem(rotated, unused)).status).toBe(201);
      const fresh = await redeem(rotated, await stack.link('m_a', undefined, rotated));
      expect(fresh.status).toBe(201);
    } finally {
      await rotated.stop();
    }
  });

  it('answers /admin (secrets: a new endpoint\'s, a rotation\'s) and /nucleus reads (payloads) with Cache-Control: no-store', async () => {
    const auth = { 'x-auth-token': 'pk_test_m_a_000000', authorization: `Bearer ${await token('m_a')}` };
    const merchant = await stack.admin(apiA, 'PUT', '/admin/merchants/m_nostore', { publicKey: 'pk_test_m_nostore_0' });
    const created = await stack.admin(apiA, 'POST', '/admin/merchants/m_nostore/endpoints', { url: `${receiver.url}/nostore` });
    const answers = [
      merchant,
      created,
      await stack.admin(apiA, 'POST', `/admin/merchants/m_nostore/endpoints/${(created.body as any).data.id}/secret/rotate`, { graceSeconds: 0 }),
      await stack.admin(apiA, 'GET', '/admin/merchants/m_nostore'),
      await call(apiA, '/nucleus/webhooks?limit=1', { method: 'GET', headers: auth }),
    ];
    expect(answers.map((a) => [a.status, a.headers.get('cache-control')])).toEqual([
      [201, 'no-store'],
      [201, 'no-store'],
      [200, 'no-store'],
      [200, 'no-store'],
      [200, 'no-store'],
    ]);
  });

  it('serves the page with a CSP of \'self\', its script small, and documents every answer', async () => {
    const page = await fetch(`http://127.0.0.1:${apiA.port}/portal/`);
    expect(page.status).toBe(200);
    expect(page.headers.get('content-security-policy')).toContain("default-src 'self'");
    expect(page.headers.get('content-security-policy')).not.toMatch(/unsafe|https:|http:/);
    const html = await page.text();
    expect(html).not.toMatch(/<script>|<style>| style=|https?:\/\//);
    const src = /<script type="module" src="([^"]+)">/.exec(html)![1]!;
    const script = await fetch(`http://127.0.0.1:${apiA.port}${src}`, { headers: { 'accept-encoding': 'gzip' } });
    expect(script.status).toBe(200);
    expect(script.headers.get('content-type')).toMatch(/^text\/javascript/);
    const { PORTAL_SCRIPT_GZIP_BUDGET, portalScriptWeight } = await import('../../apps/api/portal/page.js');
    // Every module the page loads, each gzipped alone.
    expect(portalScriptWeight().gzipBytes).toBeLessThan(PORTAL_SCRIPT_GZIP_BUDGET);
    const statuses = expectDocumented(seen);
    expect(statuses).toContain('/nucleus/webhooks/{webhookId}/resend 200');
    expect(statuses).toContain('/portal/api/session 201');
  });
});
