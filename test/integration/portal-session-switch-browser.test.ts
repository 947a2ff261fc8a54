import type { Page } from 'playwright-core';
import { portalBrowserFixture } from '../support/portal-page.js';

/**
 * A link of another merchant opened in a browser that has a live portal session (a login CSRF:
 * merchant B sends its own link to A's developer): the page asks before it swaps the session,
 * naming both merchants, and the API refuses the swap without the page's confirmation.
 */
describe('the merchant portal, given a link of another merchant while a session is live', () => {
  const fixture = portalBrowserFixture('portal-switch');

  beforeAll(async () => {
    await fixture.stack.putMerchant('m_mine', `${fixture.receiver.url}/mine`);
    await fixture.stack.putMerchant('m_theirs', `${fixture.receiver.url}/theirs`);
  });

  /** What the browser's cookie opens now, asked from the page itself. */
  const signedInAs = async (page: Page) => page.evaluate("fetch('/portal/api/session').then((r) => r.json()).then((b) => b.data && b.data.merchantId)");

  /** m_mine's session in a fresh browser, then m_theirs's link opened in a new tab of the same browser. */
  async function theirLinkOverMine(): Promise<{ mine: Page; tab: Page; posts: string[] }> {
    const mine = await fixture.pages.open(await fixture.stack.link('m_mine', { permissions: ['manage-endpoint'] }));
    await mine.getByRole('heading', { name: 'Overview' }).waitFor();
    const tab = await mine.context().newPage();
    const posts: string[] = [];
    tab.on('request', (req) => {
      if (req.method() === 'POST' && req.url().endsWith('/portal/api/session')) posts.push(req.postData() ?? '');
    });
    await tab.goto(await fixture.stack.link('m_theirs', { permissions: ['manage-endpoint'] }));
    return { mine, tab, posts };
  }

  it('names both merchants and keeps the session until a click; Stay keeps it and leaves the link unused', async () => {
    const { mine, tab, posts } = await theirLinkOverMine();
    await tab.getByRole('heading', { name: 'Switch merchant?' }).waitFor();
    await tab.getByText('You are signed in as m_mine').waitFor();
    await tab.getByText(/this link opens the portal of merchant m_theirs/).waitFor();
    expect(tab.url()).not.toContain('token=');
    // Only the refused exchange went out: no swap without the click.
    expect(posts.map((body) => JSON.parse(body).replaceSession)).toEqual([undefined]);
    expect(await signedInAs(tab)).toBe('m_mine');
    expect(await tab.getByRole('navigation', { name: 'Portal' }).isHidden()).toBe(true);

    await tab.getByRole('button', { name: 'Stay signed in' }).click();
    await tab.getByRole('heading', { name: 'Overview' }).waitFor();
    expect(await tab.locator('#who').textContent()).toContain('m_mine');
    expect(await signedInAs(mine)).toBe('m_mine');
    expect(posts).toHaveLength(1);
    const unused = await fixture.stack.db.query<{ n: string }>("SELECT count(*) AS n FROM portal_links WHERE merchant_id = 'm_theirs' AND redeemed_at IS NULL");
    expect(unused[0]!.n).toBe('1');
  });

  it('switches on a click, and ends the session it replaces', async () => {
    const { mine, tab } = await theirLinkOverMine();
    const before = (await mine.context().cookies()).find((c) => c.name === 'webhooks_portal')!.value;
    await tab.getByRole('button', { name: 'Switch merchant' }).click();
    await tab.getByRole('heading', { name: 'Overview' }).waitFor();
    expect(await tab.locator('#who').textContent()).toContain('m_theirs');
    expect(await signedInAs(mine)).toBe('m_theirs');
    // Whoever kept the replaced cookie holds nothing now.
    const replaced = await fetch(`http://127.0.0.1:${fixture.api.port}/portal/api/session`, { headers: { cookie: `webhooks_portal=${before}` } });
    expect(replaced.status).toBe(401);
  });

  it('refuses, in the API, an exchange over another merchant\'s live session that does not ask to replace it', async () => {
    const mine = await fixture.pages.open(await fixture.stack.link('m_mine'));
    await mine.getByRole('heading', { name: 'Overview' }).waitFor();
    const token = new URL(await fixture.stack.link('m_theirs')).hash.slice('#token='.length);
    const answer = await mine.evaluate(`fetch('/portal/api/session', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ token: ${JSON.stringify(token)} }) })
      .then(async (r) => [r.status, (await r.json()).error, r.headers.get('set-cookie')])`);
    expect(answer).toEqual([409, { code: 'portal_session_other_merchant', status: 409 }, null]);
    expect(await signedInAs(mine)).toBe('m_mine');
  });

  it('opens a link of the same merchant over its live session with no question, as with no session', async () => {
    const mine = await fixture.pages.open(await fixture.stack.link('m_mine'));
    await mine.getByRole('heading', { name: 'Overview' }).waitFor();
    const tab = await mine.context().newPage();
    await tab.goto(await fixture.stack.link('m_mine', { permissions: ['resend'] }));
    await tab.getByRole('heading', { name: 'Overview' }).waitFor();
    expect(await signedInAs(mine)).toBe('m_mine');
  });
});
