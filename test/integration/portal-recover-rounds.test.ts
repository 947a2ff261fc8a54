import type { ApiProgram } from '../../apps/api/program.js';
import { type Answer, call, startTestApi } from '../support/api.js';
import { type PortalStack, startPortalStack } from '../support/portal.js';

/**
 * A Recover round is one of the merchant's 10 a day only when its count runs: a count the delivery
 * log refuses (the merchant's LOG_RATE_LIMIT, shared with its own API's reads) spends none of them,
 * and leaves no round in the audit trail.
 */
describe('the portal\'s Recover rounds, when the count cannot run', () => {
  let stack: PortalStack;
  /** A replica whose log reads allow one a minute: the merchant's read budget, used up by its own API. */
  let starved: ApiProgram;

  beforeAll(async () => {
    stack = await startPortalStack('portal-recover', 1);
    starved = await startTestApi(stack.prefix, [], { logRateLimit: { perMinute: 1, burst: 1 } }, stack.env);
    await stack.putMerchant('m_rounds', 'http://127.0.0.1:9/rounds');
  });

  afterAll(async () => {
    await starved?.stop();
    await stack?.close();
  });

  const code = (answer: Answer) => [answer.status, (answer.body as { error: { code: string } | null }).error?.code ?? null, (answer.body as { message: string }).message];
  const recover = (cookie: string, api: ApiProgram) => call(api, '/portal/api/recover?since=2026-01-01T00:00:00.000Z', { method: 'GET', headers: { cookie } });

  it('gives the round back when the log refuses its count, so eleven refused counts leave the day\'s ten rounds', async () => {
    const resender = await stack.open('m_rounds', { permissions: ['resend'] }, starved);
    // The one read of the minute, spent elsewhere.
    expect((await call(starved, '/portal/api/webhooks', { method: 'GET', headers: { cookie: resender.cookie } })).status).toBe(200);
    const refused = [];
    for (let i = 0; i < 11; i++) refused.push(code(await recover(resender.cookie, starved)));
    expect(refused).toEqual(Array(11).fill([429, 'rate_limited', 'Too many delivery log reads; try again later']));

    const trail = await stack.admin(stack.apis[0]!, 'GET', '/admin/merchants/m_rounds/audit');
    expect(((trail.body as { data: { entries: Array<{ action: string }> } }).data.entries).map((e) => e.action)).not.toContain('portal.recover_round');

    // On a replica whose reads are allowed, the day's ten rounds are all there, and only ten.
    const rounds = [];
    for (let i = 0; i < 11; i++) rounds.push((await recover(resender.cookie, stack.apis[0]!)).status);
    expect(rounds).toEqual([...Array(10).fill(200), 429]);
  });
});
