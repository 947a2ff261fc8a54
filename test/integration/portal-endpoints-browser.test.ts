import { checkScreen, openEndpoint, openEndpoints, portalBrowserFixture, SHOTS } from '../support/portal-page.js';
import { waitFor } from '../support/wait.js';

/**
 * A merchant's several endpoints in the portal, in a real browser against the real API, broker
 * and PostgreSQL (issue 56): the list, adding one with the permission (and neither the control nor
 * the call without it), disabling one, rotating one's secret, deleting one, and the log naming
 * each webhook's endpoint once it carries it.
 */
describe("the merchant portal's endpoints in a browser", () => {
  const fixture = portalBrowserFixture('portal-endpoints-browser');
  const { publish } = fixture;

  const openPage = (url: string) => fixture.pages.open(url);

  it('lists several endpoints, adds one with the permission, disables one and rotates one\'s secret leaving the others\' unchanged', async () => {
    await fixture.stack.putMerchant('m_multi', `${fixture.receiver.url}/multi/main`);
    const second = await fixture.stack.admin(fixture.api, 'POST', '/admin/merchants/m_multi/endpoints', { url: `${fixture.receiver.url}/multi/payouts`, description: 'payouts', events: ['payout'] });
    expect(second.status).toBe(201);
    await waitFor('the dispatcher has both', () => fixture.stack.dispatcher.merchants.byId('m_multi')?.endpoints.length === 2, 5_000);
    const page = await openPage(await fixture.stack.link('m_multi'));
    await page.getByRole('heading', { name: 'Overview' }).waitFor();
    // The overview lists both, the Endpoints screen too, each with its events and state.
    await page.getByText(`${fixture.receiver.url}/multi/payouts`).waitFor();
    await openEndpoints(page);
    expect(await page.locator('tbody tr').count()).toBe(2);
    expect(await page.locator('tbody tr').nth(1).textContent()).toContain('payout');
    await checkScreen(page);

    // Adds a third: its secret is shown once, and the dispatchers have it.
    await page.getByLabel('New endpoint URL').fill(`${fixture.moved.url}/multi/staging`);
    await page.getByLabel('Description').fill('staging');
    await page.getByRole('checkbox', { name: 'refund.completed' }).uncheck();
    await page.getByRole('button', { name: 'Add endpoint' }).click();
    const added = await page.getByLabel('New signing secret').inputValue();
    expect(added).toMatch(/^whsec_/);
    await page.locator('tbody tr').nth(2).getByRole('link', { name: 'staging' }).waitFor();
    const staging = await waitFor('the dispatcher has the third', () => fixture.stack.dispatcher.merchants.byId('m_multi')?.endpoints.find((e) => e.secret === added), 5_000);
    expect(staging).toMatchObject({ url: `${fixture.moved.url}/multi/staging`, description: 'staging', events: ['charge.completed', 'payout'], enabled: true });
    if (SHOTS) await page.screenshot({ path: `${SHOTS}/portal-endpoints.png`, fullPage: true });

    // Disables the payouts one alone.
    await page.locator('tbody tr').nth(1).getByRole('link').click();
    await page.getByRole('heading', { name: 'Endpoint payouts' }).waitFor();
    await page.getByLabel('Enabled (webhooks are sent)').uncheck();
    await page.getByRole('button', { name: 'Save endpoint' }).click();
    await page.getByText('Saved. The next webhook goes to this URL.').waitFor();
    await waitFor('the dispatcher has it off', () => fixture.stack.dispatcher.merchants.byId('m_multi')?.endpoints[1]?.enabled === false, 5_000);
    expect(fixture.stack.dispatcher.merchants.byId('m_multi')!.endpoints.map((e) => e.enabled)).toEqual([true, false, true]);
    await page.getByRole('link', { name: '← All endpoints' }).click();
    await page.locator('tbody tr').nth(1).getByText('disabled by you').waitFor();

    // Rotates the first one's secret: the others keep theirs.
    const before = fixture.stack.dispatcher.merchants.byId('m_multi')!.endpoints.map((e) => e.secret);
    await page.locator('tbody tr').nth(0).getByRole('link').click();
    await page.getByRole('heading', { level: 1, name: `Endpoint ${fixture.receiver.url}/multi/main` }).waitFor();
    await page.getByLabel('Old secret keeps signing for').selectOption('0');
    await page.getByRole('button', { name: 'Rotate secret' }).click();
    const rotated = await page.getByLabel('New signing secret').inputValue();
    expect(rotated).toMatch(/^whsec_/);
    await waitFor('the dispatcher signs with the new secret', () => fixture.stack.dispatcher.merchants.byId('m_multi')?.endpoints[0]?.secret === rotated, 5_000);
    expect(fixture.stack.dispatcher.merchants.byId('m_multi')!.endpoints.map((e) => e.secret)).toEqual([rotated, before[1], before[2]]);
    await checkScreen(page);

    // Deletes the staging one, after saying what it will do.
    await openEndpoint(page, 2);
    await page.getByRole('button', { name: 'Delete endpoint' }).click();
    await page.getByRole('button', { name: 'Yes, delete this endpoint' }).click();
    await page.getByRole('heading', { level: 1, name: 'Endpoints', exact: true }).waitFor();
    await waitFor('the dispatcher no longer has it', () => fixture.stack.dispatcher.merchants.byId('m_multi')?.endpoints.length === 2, 5_000);
    await waitFor('the list shows two', async () => (await page.locator('tbody tr').count()) === 2, 5_000);
  });

  it('shows a view-only link the endpoints without the controls to add or change them, and the API refuses the add', async () => {
    await fixture.stack.putMerchant('m_viewer', `${fixture.receiver.url}/viewer`);
    const page = await openPage(await fixture.stack.link('m_viewer', { permissions: [] }));
    await page.getByRole('heading', { name: 'Overview' }).waitFor();
    await openEndpoints(page);
    await page.getByText('This link lets you view the endpoints, not add or change them.').waitFor();
    expect(await page.getByRole('button', { name: 'Add endpoint' }).count()).toBe(0);
    expect(await page.getByLabel('New endpoint URL').count()).toBe(0);
    const refused = await page.evaluate(`(async () => {
      const session = await (await fetch('/portal/api/session')).json();
      const added = await fetch('/portal/api/endpoints', { method: 'POST', headers: { 'x-csrf-token': session.data.csrfToken, 'content-type': 'application/json' }, body: JSON.stringify({ url: location.origin + '/elsewhere' }) });
      return [added.status, (await added.json()).error.code];
    })()`);
    expect(refused).toEqual([403, 'permission_denied']);
    expect(fixture.stack.dispatcher.merchants.byId('m_viewer')!.endpoints).toHaveLength(1);
    await openEndpoint(page);
    for (const control of ['Save endpoint', 'Rotate secret', 'Send test event', 'Delete endpoint']) expect(await page.getByRole('button', { name: control }).count()).toBe(0);
    expect(await page.getByLabel('Endpoint URL').isDisabled()).toBe(true);
  });

  it("names each webhook's endpoint in the log and filters by it", async () => {
    await fixture.stack.putMerchant('m_logeps', `${fixture.receiver.url}/logeps`);
    const { webhookId } = await publish('m_logeps');
    await fixture.stack.logged('m_logeps', webhookId, 'delivered');
    const endpointId = fixture.stack.dispatcher.merchants.byId('m_logeps')!.endpoints[0]!.id;
    const page = await openPage(await fixture.stack.link('m_logeps'));
    await page.getByRole('heading', { name: 'Overview' }).waitFor();
    const base = page.url().split('#')[0];
    // The list the page asks for, to see the filter's parameter go out.
    const asked: string[] = [];
    page.on('request', (request) => {
      if (request.url().includes('/portal/api/webhooks?')) asked.push(request.url());
    });
    await page.goto(`${base}#/webhooks`);
    await page.getByRole('heading', { level: 1, name: 'Webhooks', exact: true }).waitFor();
    await page.getByRole('columnheader', { name: 'Endpoint', exact: true }).waitFor();
    await page.getByRole('cell', { name: `${fixture.receiver.url}/logeps` }).first().waitFor();
    await page.getByLabel('Endpoint', { exact: true }).selectOption(endpointId);
    await page.getByRole('button', { name: 'Apply filters' }).click();
    await page.waitForURL(new RegExp(`endpointId=${endpointId}`));
    await waitFor('the list asked for that endpoint', () => asked.some((url) => url.includes(`endpointId=${endpointId}`)), 5_000);
    // The log's own filter: the webhook of that endpoint is still listed.
    await page.getByRole('cell', { name: `${fixture.receiver.url}/logeps` }).first().waitFor();
    await checkScreen(page);
  });
});
