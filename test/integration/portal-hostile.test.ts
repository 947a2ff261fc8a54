import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Page } from 'playwright-core';
import { portalBrowserFixture } from '../support/portal-page.js';

/**
 * The portal in Chromium as a hostile page, or a mangled address, would drive it: a page of the
 * same site (another port of 127.0.0.1 is one) loading the portal's API as images, and addresses
 * no screen of the portal writes. portal-browser.test.ts drives the flows a merchant uses.
 */
describe('the merchant portal against a hostile page and mangled addresses', () => {
  const fixture = portalBrowserFixture('portal-hostile');
  let hostile: Server | undefined;

  beforeAll(async () => {
    await fixture.stack.putMerchant('m_hostile', `${fixture.receiver.url}/hostile`);
  });

  afterAll(async () => {
    hostile?.closeAllConnections();
    await new Promise((resolve) => (hostile ? hostile.close(resolve) : resolve(undefined)));
  });

  /** A page opened from a fresh link, its uncaught errors collected (the fixture's own listener also fails the file on one). */
  async function portal(permissions: string[] = []): Promise<{ page: Page; errors: string[] }> {
    const page = await fixture.pages.open(await fixture.stack.link('m_hostile', { permissions }));
    const errors: string[] = [];
    page.on('pageerror', (err) => errors.push(String(err)));
    await page.getByRole('heading', { name: 'Overview' }).waitFor();
    return { page, errors };
  }

  it('does not let a page of the same site spend the merchant\'s Recover rounds by loading the count as images', async () => {
    const api = `http://127.0.0.1:${fixture.api.port}`;
    // Twelve images, each its own URL (a page loads one URL once): the day's 10 rounds and more. Same
    // site, so the SameSite=Strict cookie goes with each. A loaded CI host's Chromium once asked 10 of 11.
    const since = (i: number) => encodeURIComponent(new Date(Date.now() - 3_600_000 - i).toISOString());
    const images = Array.from({ length: 12 }, (_, i) => `<img alt="" src="${api}/portal/api/recover?since=${since(i)}">`).join('');
    const asked: string[] = [];
    hostile = createServer((_req, res) => res.writeHead(200, { 'content-type': 'text/html' }).end(`<!doctype html><title>Cats</title>${images}`));
    hostile.listen(0, '127.0.0.1');
    await once(hostile, 'listening');
    const { page, errors } = await portal(['resend']);
    const other = await page.context().newPage();
    // Each is sent, and the answer is refused to the page (CORP); what matters is what the API did with it.
    other.on('request', (req) => {
      if (req.url().includes('/portal/api/recover')) asked.push(req.url());
    });
    // goto waits for the load event, which waits for every image.
    await other.goto(`http://127.0.0.1:${(hostile.address() as AddressInfo).port}/`);
    await other.close();
    expect(asked.length).toBeGreaterThanOrEqual(11);

    await page.goto(`${page.url().split('#')[0]}#/recover`);
    await page.getByRole('heading', { name: 'Recover' }).waitFor();
    await page.getByRole('button', { name: 'Find failed webhooks' }).click();
    // The merchant's own first round of the day: counted, not refused.
    const result = page.locator('#main [role=status], #main [role=alert]').first();
    await result.waitFor();
    expect(await result.textContent()).toMatch(/^0 failed webhook\(s\) since/);
    expect(errors).toEqual([]);
  });

  it('draws a screen for an address with a malformed percent-encoding or a time that is none, instead of throwing', async () => {
    const { page, errors } = await portal();
    const base = page.url().split('#')[0];
    const screen = async (hash: string, heading: string | RegExp, alert: RegExp) => {
      await page.goto(`${base}${hash}`);
      await page.getByRole('heading', { level: 1, name: heading }).waitFor({ timeout: 5_000 });
      await page.locator('#main [role=alert]').filter({ hasText: alert }).waitFor({ timeout: 5_000 });
    };
    await screen('#/webhooks/%E0%A4%A', 'Webhook', /No webhook %E0%A4%A/);
    await screen('#/endpoints/%zz', 'Endpoint', /endpointId path segment is not valid/);
    await screen('#/webhooks?since=yesterday', 'Webhooks', /since query parameter is not valid/);
    expect(errors).toEqual([]);
  });

  it('skips to the content and stays on the screen: the skip link\'s #main is no screen\'s address', async () => {
    const { page, errors } = await portal();
    await page.goto(`${page.url().split('#')[0]}#/verify`);
    await page.getByRole('heading', { level: 1, name: 'Verify signatures' }).waitFor();
    await page.getByRole('link', { name: 'Skip to content' }).focus();
    await page.keyboard.press('Enter');
    await page.waitForFunction('document.activeElement && document.activeElement.id === "main"');
    expect(new URL(page.url()).hash).toBe('#/verify');
    expect(await page.locator('h1').textContent()).toBe('Verify signatures');
    expect(errors).toEqual([]);
  });
});
