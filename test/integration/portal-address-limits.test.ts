import { request } from 'node:http';
import pg from 'pg';
import type { ApiProgram } from '../../apps/api/program.js';
import type { Queryable } from '../../libs/delivery-store/index.js';
import { adminToken, type Answer, call, expectDocumented, seen, startTestApi, waitReady } from '../support/api.js';
import { startPortalStack, type PortalStack } from '../support/portal.js';
import { Receiver } from '../support/receiver.js';

/**
 * The portal against whoever holds a leaked link or an ended session, outside development mode,
 * through two real API replicas and PostgreSQL: links built from PORTAL_PUBLIC_URL only, Secure
 * cookies, and per client address (TRUST_PROXY, X-Forwarded-For) one limit on link exchanges that
 * both replicas enforce; forged tokens and cookies cost no query, dead ones one per replica.
 */
describe('the portal outside development mode: links, cookies and per-address limits', () => {
  let stack: PortalStack;
  let receiver: Receiver;
  let apiA: ApiProgram;
  let apiB: ApiProgram;
  /** Queries the replicas ran on the delivery log's pool (where sessions are looked up). */
  let logQueries = 0;
  const counting = (db: Queryable): Queryable => ({
    query: (text, params) => {
      logQueries++;
      return db.query(text, params);
    },
  });

  beforeAll(async () => {
    receiver = await Receiver.start(() => 204);
    // One development-mode replica to set merchants up (http receivers), then two as deployed.
    stack = await startPortalStack('portal-address', 1);
    await stack.putMerchant('m_l', `${receiver.url}/l`);
    // A burst of 30 refilled at 1 a minute: the 31st of a minute is refused however slow the machine.
    const replica = async () =>
      waitReady(
        await startTestApi(stack.prefix, [], { portalAddressLimit: { perMinute: 1, burst: 30 }, wrapLogQueries: counting }, { ...stack.env, WEBHOOKS_DEV: undefined, TRUST_PROXY: 'loopback' }),
      );
    apiA = await replica();
    apiB = await replica();
  });

  afterAll(async () => {
    await apiA?.stop();
    await apiB?.stop();
    await stack?.close();
    await receiver?.close();
  });

  const tokenOf = (url: string) => /#token=([A-Za-z0-9_.-]+)$/.exec(url)![1]!;
  const code = (answer: Answer) => [answer.status, (answer.body as { error: { code: string } | null }).error?.code ?? null];
  const exchange = (api: ApiProgram, token: string, from: string) =>
    call(api, '/portal/api/session', { method: 'POST', headers: { 'content-type': 'application/json', 'x-forwarded-for': from }, body: JSON.stringify({ token }) });
  const lookup = (api: ApiProgram, cookie: string, from: string) => call(api, '/portal/api/session', { method: 'GET', headers: { cookie, 'x-forwarded-for': from } });
  const limitRows = async (address: string) => Number((await stack.db.query<{ n: string }>('SELECT count(*) AS n FROM rate_limits WHERE key = $1', [`portal-address:${address}`]))[0]!.n);
  /** A token of the right shape whose HMAC is not ours. */
  const forged = (i: number) => `${String(i).padStart(43, 'f')}.${'A'.repeat(43)}`;

  it('builds the link from PORTAL_PUBLIC_URL whatever Host and X-Forwarded-Host the request carries', async () => {
    const auth = `Bearer ${await adminToken()}`;
    const answer = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = request(
        {
          host: '127.0.0.1',
          port: apiA.port,
          method: 'POST',
          path: '/admin/merchants/m_l/portal-sessions',
          headers: { authorization: auth, 'content-type': 'application/json', host: 'attacker.example:8443', 'x-forwarded-host': 'attacker.example', 'x-forwarded-proto': 'https' },
        },
        (res) => {
          let body = '';
          res.on('data', (chunk: Buffer) => (body += chunk.toString()));
          res.on('end', () => resolve({ status: res.statusCode!, body }));
        },
      );
      req.on('error', reject);
      req.end('{}');
    });
    expect(answer.status).toBe(201);
    const url = (JSON.parse(answer.body) as { data: { url: string } }).data.url;
    expect(url.startsWith(`http://127.0.0.1:${apiA.port}/portal/#token=`)).toBe(true);
    expect(url).not.toContain('attacker');
  });

  it('sets the session cookie Secure outside development mode (HttpOnly, SameSite=Strict, no Max-Age), and not in development mode', async () => {
    const opened = await exchange(apiB, tokenOf(await stack.link('m_l', undefined, apiB)), '203.0.113.1');
    expect(opened.status).toBe(201);
    const cookie = opened.headers.get('set-cookie')!;
    expect(cookie).toMatch(/^webhooks_portal=[A-Za-z0-9_-]{43}\.[A-Za-z0-9_-]{43}; /);
    expect(cookie.split('; ').slice(1).sort()).toEqual(['HttpOnly', 'Path=/portal', 'SameSite=Strict', 'Secure']);
    // The development-mode replica keeps today's cookie: over plain http, not Secure.
    const dev = await exchange(stack.apis[0]!, tokenOf(await stack.link('m_l')), '203.0.113.1');
    expect(dev.status).toBe(201);
    expect(dev.headers.get('set-cookie')!.split('; ')).not.toContain('Secure');
  });

  it('refuses the 31st link exchange of a minute from one address on either replica, 429 with Retry-After, and not another address', async () => {
    const from = '198.51.100.7';
    // 30 links, each exchanged once: every exchange counts, whether it opens a session or not.
    const answers: Answer[] = [];
    for (let i = 0; i < 30; i++) answers.push(await exchange(i % 2 === 0 ? apiA : apiB, tokenOf(await stack.link('m_l', undefined, apiA)), from));
    expect(answers.map((a) => a.status)).toEqual(Array(30).fill(201));
    for (const api of [apiA, apiB, apiA]) {
      const refused = await exchange(api, tokenOf(await stack.link('m_l', undefined, apiA)), from);
      expect(code(refused)).toEqual([429, 'rate_limited']);
      const retryAfter = Number(refused.headers.get('retry-after'));
      expect(retryAfter).toBeGreaterThanOrEqual(1);
      expect(retryAfter).toBeLessThanOrEqual(60);
    }
    // Another client (another address behind the same trusted proxy) has a budget of its own.
    const other = await exchange(apiB, tokenOf(await stack.link('m_l', undefined, apiA)), '198.51.100.8');
    expect(other.status).toBe(201);
    // A forged token from the refused address is still refused by its HMAC, without counting.
    expect(code(await exchange(apiA, forged(1), from))).toEqual([401, 'portal_link_invalid']);
  });

  it('answers a replayed dead link or session id from memory: behind one NAT address it costs a query per replica, counts against no one, and holds up no live session', async () => {
    const nat = '192.0.2.60';
    const url = await stack.link('m_l', undefined, apiA);
    const opened = await exchange(apiA, tokenOf(url), nat);
    const cookie = opened.headers.get('set-cookie')!.split(';')[0]!;
    const live = await exchange(apiA, tokenOf(await stack.link('m_l', undefined, apiA)), nat);
    const liveCookie = live.headers.get('set-cookie')!.split(';')[0]!;
    // The session is logged out; someone behind the same address keeps replaying its cookie and its link.
    const csrf = (opened.body as { data: { csrfToken: string } }).data.csrfToken;
    expect((await call(apiA, '/portal/api/logout', { method: 'POST', headers: { cookie, 'x-csrf-token': csrf, 'x-forwarded-for': nat } })).status).toBe(200);
    expect(code(await lookup(apiB, cookie, nat))).toEqual([401, 'portal_session_required']);
    expect(code(await exchange(apiA, tokenOf(url), nat))).toEqual([401, 'portal_link_used']);
    expect(code(await exchange(apiB, tokenOf(url), nat))).toEqual([401, 'portal_link_used']);
    const before = logQueries;
    const rowsBefore = await limitRows(nat);
    for (let i = 0; i < 60; i++) {
      const api = i % 2 === 0 ? apiA : apiB;
      expect(code(await lookup(api, cookie, nat))).toEqual([401, 'portal_session_required']);
      expect(code(await exchange(api, tokenOf(url), nat))).toEqual([401, 'portal_link_used']);
    }
    expect(logQueries - before).toBe(0);
    expect(await limitRows(nat)).toBe(rowsBefore);
    // The merchant behind the same address keeps its session, and may still open a new link.
    expect((await lookup(apiA, liveCookie, nat)).status).toBe(200);
    expect((await lookup(apiB, liveCookie, nat)).status).toBe(200);
    expect((await exchange(apiB, tokenOf(await stack.link('m_l', undefined, apiA)), nat)).status).toBe(201);
  });

  it('sweeps stale limit rows through an index on their time, not by reading every row', async () => {
    const client = new pg.Client({ connectionString: stack.db.url });
    await client.connect();
    try {
      await client.query('SET enable_seqscan = off');
      const plan = await client.query<{ 'QUERY PLAN': string }>("EXPLAIN DELETE FROM rate_limits WHERE tat < now() - interval '1 minute'");
      expect(plan.rows.map((row) => row['QUERY PLAN']).join('\n')).toMatch(/Index (Only )?Scan using rate_limits_tat|Bitmap Index Scan on rate_limits_tat/);
    } finally {
      await client.end();
    }
  });

  it('refuses forged cookies and link tokens by their HMAC: no query on either pool, never counted', async () => {
    const from = '192.0.2.99';
    const before = logQueries;
    for (let i = 0; i < 80; i++) {
      const api = i % 2 === 0 ? apiA : apiB;
      expect(code(await lookup(api, `webhooks_portal=${forged(i)}`, from))).toEqual([401, 'portal_session_required']);
      expect(code(await exchange(api, forged(i), from))).toEqual([401, 'portal_link_invalid']);
    }
    // Nothing on the sessions' pool (the delivery log's), and the address limit was never asked.
    expect(logQueries - before).toBe(0);
    expect(await limitRows(from)).toBe(0);
    // Whereas one real (ended) link spends a query and is counted.
    const url = await stack.link('m_l', undefined, apiA);
    await exchange(apiA, tokenOf(url), '192.0.2.98');
    expect(logQueries - before).toBeGreaterThan(0);
    expect(await limitRows('192.0.2.98')).toBe(1);
  });

  it('documents every answer it saw, 429 included', () => {
    const statuses = expectDocumented(seen);
    expect(statuses).toContain('/portal/api/session 429');
  });
});
