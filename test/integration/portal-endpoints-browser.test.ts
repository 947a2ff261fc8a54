import { checkScreen, openEndpoint, openEndpoints, portalBrowserFixture, SHOTS } from '../support/portal-page.js';
import { waitFor } from '../support/wait.js';
import type { EventName } from '../../libs/contracts/index.js';

/**
 * A merchant's several endpoints in the portal, in a real browser against the real API, broker
 * and PostgreSQL (issue 56): the list, adding one with the permission (and neither the control nor
 * the call without it), disabling one, rotating one's secret, deleting one, the log naming each
 * webhook's endpoint once it carries it, and the log grouped by endpoint.
 */
describe("the merchant portal's endpoints in a browser", () => {
  // The grouping case's refunds endpoint and the fan-out case's second one fail (one attempt here, then failed): a status of their own.
  const fixture = portalBrowserFixture('portal-endpoints-browser', (_n, req) => (/\/(grp\/refunds|fan\/down)$/.test(req.path) ? 500 : 204));
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

  it('offers no delete and no new URL for an endpoint the platform turned off, and still saves its other settings', async () => {
    const url = `${fixture.receiver.url}/opoff`;
    await fixture.stack.putMerchant('m_opoff', url);
    const id = fixture.stack.dispatcher.merchants.byId('m_opoff')!.endpoints[0]!.id;
    expect((await fixture.stack.admin(fixture.api, 'PATCH', `/admin/merchants/m_opoff/endpoints/${id}`, { enabled: false })).status).toBe(200);
    const page = await openPage(await fixture.stack.link('m_opoff'));
    await page.getByRole('heading', { name: 'Overview' }).waitFor();
    await openEndpoint(page);
    await page.getByText('The platform turned this endpoint off: only the platform can turn it on again.').waitFor();
    expect(await page.getByRole('button', { name: 'Delete endpoint' }).count()).toBe(0);
    expect(await page.getByLabel('Endpoint URL').isEditable()).toBe(false);
    expect(await page.getByLabel('Enabled (webhooks are sent)').isDisabled()).toBe(true);
    await page.getByLabel('Description').fill('waiting for the platform');
    await page.getByRole('button', { name: 'Save endpoint' }).click();
    await page.getByText('Saved. The next webhook goes to this URL.').waitFor();
    await waitFor('the dispatcher has the description', () => fixture.stack.dispatcher.merchants.byId('m_opoff')?.endpoints[0]?.description === 'waiting for the platform', 5_000);
    expect(fixture.stack.dispatcher.merchants.byId('m_opoff')!.endpoints.map((e) => [e.url, e.enabled])).toEqual([[url, false]]);
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
    // One endpoint: the log as one list, no section per endpoint (sections are drawn with the heading).
    expect(await page.locator('main section').count()).toBe(0);
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

  it('groups the log by endpoint, each section with its own latest deliveries, and opens one endpoint\'s whole log', async () => {
    // Three endpoints, one event each, so that a delivery's event says which endpoint it went to.
    await fixture.stack.putMerchant('m_grp', `${fixture.receiver.url}/grp/charges`);
    const first = fixture.stack.dispatcher.merchants.byId('m_grp')!.endpoints[0]!.id;
    expect((await fixture.stack.admin(fixture.api, 'PATCH', `/admin/merchants/m_grp/endpoints/${first}`, { events: ['charge.completed'] })).status).toBe(200);
    for (const [name, event] of [['payouts', 'payout'], ['refunds', 'refund.completed']] as const) {
      const added = await fixture.stack.admin(fixture.api, 'POST', '/admin/merchants/m_grp/endpoints', { url: `${fixture.receiver.url}/grp/${name}`, description: name, events: [event] });
      expect(added.status).toBe(201);
    }
    await waitFor('the dispatcher has all three, one event each', () => {
      const eps = fixture.stack.dispatcher.merchants.byId('m_grp')?.endpoints ?? [];
      return eps.length === 3 && eps.every((e) => e.events?.length === 1);
    }, 5_000);
    const ids = fixture.stack.dispatcher.merchants.byId('m_grp')!.endpoints.map((e) => e.id);
    // 2 charges and 3 payouts delivered, 1 refund failed (its endpoint answers 500).
    const sent: Array<[EventName, string]> = [['charge.completed', 'delivered'], ['charge.completed', 'delivered'], ['payout', 'delivered'], ['payout', 'delivered'], ['payout', 'delivered'], ['refund.completed', 'failed']];
    for (const [event, status] of sent) {
      const { webhookId } = await publish('m_grp', event);
      await fixture.stack.logged('m_grp', webhookId, status);
    }

    const page = await openPage(await fixture.stack.link('m_grp'));
    await page.getByRole('heading', { name: 'Overview' }).waitFor();
    // The overview: each endpoint's own last 24 hours.
    const overviewRow = (name: string) => page.locator('tbody tr', { has: page.getByRole('link', { name, exact: true }) });
    await overviewRow('payouts').getByRole('link', { name: '3 delivered, 0 failed' }).waitFor();
    await overviewRow('refunds').getByRole('link', { name: '0 delivered, 1 failed' }).waitFor();
    await overviewRow(first).getByRole('link', { name: '2 delivered, 0 failed' }).waitFor();

    const asked: string[] = [];
    page.on('request', (request) => {
      if (request.url().includes('/portal/api/webhooks?')) asked.push(request.url());
    });
    await page.getByRole('navigation', { name: 'Portal' }).getByRole('link', { name: 'Webhooks' }).click();
    await page.getByRole('heading', { level: 1, name: 'Webhooks', exact: true }).waitFor();
    const expected = [
      { heading: `${fixture.receiver.url}/grp/charges`, event: 'charge.completed', counts: 'Latest 2: 2 delivered, 0 retrying, 0 failed, 0 skipped' },
      { heading: 'payouts', event: 'payout', counts: 'Latest 3: 3 delivered, 0 retrying, 0 failed, 0 skipped' },
      { heading: 'refunds', event: 'refund.completed', counts: 'Latest 1: 0 delivered, 0 retrying, 1 failed, 0 skipped' },
    ];
    await waitFor('three sections, each filled', async () => (await page.locator('main section').count()) === 3 && (await page.locator('main section tbody').count()) === 3, 10_000);
    for (const [i, want] of expected.entries()) {
      const section = page.locator('main section').nth(i);
      expect(await section.getByRole('heading', { level: 2 }).textContent()).toBe(want.heading);
      expect(await section.textContent()).toContain(want.counts);
      await section.getByText('enabled', { exact: true }).waitFor();
      // Only its own deliveries: each row's event is the one its endpoint receives.
      const events = await section.locator('tbody tr td:nth-child(2)').allTextContents();
      expect(events).toEqual(Array(Number(/Latest (\d+)/.exec(want.counts)![1])).fill(want.event));
    }
    // Each section asked the list for its own endpoint, a small page.
    for (const id of ids) expect(asked.some((url) => url.includes(`endpointId=${id}&limit=10`))).toBe(true);
    await checkScreen(page);
    if (SHOTS) await page.screenshot({ path: `${SHOTS}/portal-log-grouped.png`, fullPage: true });

    // Its control opens the endpoint's whole log: the list's filter, one list, paged as before.
    await page.getByRole('region', { name: 'payouts', exact: true }).getByRole('link', { name: 'Full log of payouts' }).click();
    await page.waitForURL(new RegExp(`endpointId=${ids[1]}`));
    await page.getByRole('columnheader', { name: 'Endpoint', exact: true }).waitFor();
    expect(await page.locator('main section').count()).toBe(0);
    expect(await page.getByLabel('Endpoint', { exact: true }).inputValue()).toBe(ids[1]);
    expect(await page.locator('tbody tr td:nth-child(2)').allTextContents()).toEqual(['payouts', 'payouts', 'payouts']);
    expect(asked.some((url) => url.includes(`endpointId=${ids[1]}&limit=25`))).toBe(true);

    // Every delivery in one list, newest first, on request.
    await page.goto(`${page.url().split('#')[0]}#/webhooks?list`);
    await waitFor('the one list', async () => (await page.locator('main tbody tr').count()) === sent.length, 5_000);
    expect(await page.locator('main section').count()).toBe(0);
  });

  it("shows one webhook's delivery to each endpoint, each with its own status and attempts, and resends only the failed one", async () => {
    await fixture.stack.putMerchant('m_fan', `${fixture.receiver.url}/fan/up`);
    const added = await fixture.stack.admin(fixture.api, 'POST', '/admin/merchants/m_fan/endpoints', { url: `${fixture.receiver.url}/fan/down`, description: 'down' });
    expect(added.status).toBe(201);
    await waitFor('the dispatcher has both', () => fixture.stack.dispatcher.merchants.byId('m_fan')?.endpoints.length === 2, 5_000);
    const [up, down] = fixture.stack.dispatcher.merchants.byId('m_fan')!.endpoints.map((e) => e.id);
    const { webhookId } = await publish('m_fan');
    const statuses = () => fixture.stack.db.query<{ endpoint_id: string; status: string }>('SELECT endpoint_id, status FROM delivery_webhooks WHERE merchant_id = $1 AND webhook_id = $2 ORDER BY endpoint_id', ['m_fan', webhookId]);
    const settled = (want: Record<string, string>) => async () => {
      const rows = await statuses();
      return rows.length === 2 && rows.every((r) => want[r.endpoint_id] === r.status);
    };
    await waitFor('delivered to one, failed on the other', settled({ [up!]: 'delivered', [down!]: 'failed' }), 15_000);

    const page = await openPage(await fixture.stack.link('m_fan'));
    await page.getByRole('heading', { name: 'Overview' }).waitFor();
    await page.goto(`${page.url().split('#')[0]}#/webhooks?list`);
    await waitFor('both deliveries listed', async () => (await page.locator('main tbody tr').count()) === 2, 5_000);
    await page.locator('main tbody tr').first().getByRole('link').click();
    await page.getByRole('heading', { level: 1, name: `Webhook ${webhookId}` }).waitFor();
    // One row per endpoint: its name, its own status and attempts, and a resend on the failed one alone.
    const deliveries = page.getByRole('region', { name: 'Each endpoint\'s delivery' });
    const rowOf = (name: string) => deliveries.locator('tbody tr', { has: page.getByRole('link', { name, exact: true }) });
    expect(await deliveries.locator('tbody tr').count()).toBe(2);
    expect(await rowOf(`${fixture.receiver.url}/fan/up`).textContent()).toMatch(/delivered.*1.*204/);
    expect(await rowOf('down').textContent()).toMatch(/failed.*1.*500/);
    expect(await rowOf(`${fixture.receiver.url}/fan/up`).getByRole('button').count()).toBe(0);
    // Every attempt names its endpoint.
    const attempts = page.getByRole('region', { name: /^Every attempt/ });
    expect((await attempts.locator('tbody tr').allTextContents()).sort()).toEqual([expect.stringContaining('down'), expect.stringContaining(`${fixture.receiver.url}/fan/up`)].sort());
    await checkScreen(page);

    const asked: string[] = [];
    page.on('request', (request) => { if (request.url().includes('/resend')) asked.push(request.url()); });
    await rowOf('down').getByRole('button', { name: 'Resend to down' }).click();
    await waitFor('resent on that endpoint alone', () => asked.some((url) => url.endsWith(`/resend?endpointId=${down}`)), 5_000);
    await page.locator('main').getByText('Resent: now failed').waitFor({ timeout: 20_000 });
    expect(await rowOf('down').textContent()).toMatch(/failed.*2.*500/);
    expect(await rowOf(`${fixture.receiver.url}/fan/up`).textContent()).toMatch(/delivered.*1.*204/);
  });
});
